# secagg protocol tests: labels and timeouts beyond the defaults of CMakeLists.txt here.
#
