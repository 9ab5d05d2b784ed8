// The main of the unit-test program: Catch2's session (compiled once, catch_session.cpp).
#include "catch_session.h"

int main(int argc, char** argv) {
  return zero::testing::run_catch(argc, argv);
}
