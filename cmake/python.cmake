message(STATUS "python: later")
