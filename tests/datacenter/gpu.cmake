# GPU check program: compiled in every CUDA-capable build so it never rots, but not a ctest
# (CI has no GPU). datacenter/scripts/gpu-check.sh builds and runs it on a GPU machine.
if(FL_DC_CUDA AND TARGET fl_datacenter_static)
  add_executable(dc_gpu_check ${CMAKE_CURRENT_LIST_DIR}/gpu/gpu_check.c)
  fl_target_defaults(dc_gpu_check)
  target_link_libraries(dc_gpu_check PRIVATE fl_datacenter_static)  # brings cudart, cuBLAS
endif()
