// disk_space: the free space of the file system a path is or will be on.
#include <catch2/catch.hpp>

#include <string>

#include "offload/disk_space.h"
#include "scratch.h"

namespace zero::offload {
namespace {

TEST_CASE("disk_space asks the nearest existing directory of a path not made yet", "[disk_space]") {
  zero::testing::ScratchDir dir("disk-space");
  const auto here = disk_space(dir.path());
  REQUIRE(here);
  CHECK(here->probed == dir.path());
  CHECK(here->free > 0);
  CHECK_THAT(here->filesystem, Catch::StartsWith("device "));

  const auto deeper = disk_space(dir.path() + "/not/made/yet");
  REQUIRE(deeper);
  CHECK(deeper->probed == dir.path());
  CHECK(deeper->filesystem == here->filesystem);

  // A relative path is taken from the working directory.
  const auto relative = disk_space("no-such-directory-here");
  REQUIRE(relative);
  CHECK(relative->probed == std::filesystem::current_path().string());
}

}  // namespace
}  // namespace zero::offload
