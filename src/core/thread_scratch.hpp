// A thread's instance of T, reached through a call the compiler cannot see into. In a shared
// library (the Python extension) every thread-local lookup is itself a call, which the compiler
// repeats at each use of a thread_local variable rather than keep its address; a hot function
// takes the reference once from here instead.
#pragma once

namespace synoros {

template <class T>
[[gnu::noinline]] T& thread_scratch() {
  thread_local T t;
  return t;
}

}  // namespace synoros
