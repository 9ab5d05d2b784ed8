// Catch2's implementation is compiled once, in catch_session.cpp (the library
// zero_catch_session): it is the slowest file of the tree to compile, and each test program's
// main used to compile it again. A main runs the session through this.
#pragma once

namespace zero::testing {

// Catch::Session().run(argc, argv): the test cases, filtered by the command line.
int run_catch(int argc, char** argv);

}  // namespace zero::testing
