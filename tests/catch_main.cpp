// The Catch2 main of the unit-test program.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
