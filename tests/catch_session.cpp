// Catch2's implementation, without a main (see catch_session.h).
#define CATCH_CONFIG_RUNNER
#include "catch_session.h"

#include <catch2/catch.hpp>

namespace zero::testing {

int run_catch(int argc, char** argv) {
  return Catch::Session().run(argc, argv);
}

}  // namespace zero::testing
