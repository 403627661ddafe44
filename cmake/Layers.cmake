# The tool is built as layers: one folder, one static library, and target_link_libraries naming the
# layers below it, which are the only ones its code may include (tests/structure.py checks the
# includes against these calls).
#
# attnres_layer(NAME SOURCES host.cpp... [DEVICE_OBJECTS object-library...] [LAYERS lower-layer...]
#               [LIBRARIES other-library...])
# With ATTNRES_SANITIZED_TESTS each layer is built a second time as NAME_sanitized: the same host
# sources under ASan/UBSan, the same device objects (compiled once), linking the sanitized layers.
function(attnres_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEVICE_OBJECTS;LAYERS;LIBRARIES" ${ARGN})
  set(suffixes "")
  if(ATTNRES_SANITIZED_TESTS)
    set(suffixes _sanitized)
  endif()
  foreach(suffix IN ITEMS "" ${suffixes})
    set(target ${name}${suffix})
    set(objects "")
    foreach(object_library IN LISTS ARG_DEVICE_OBJECTS)
      list(APPEND objects $<TARGET_OBJECTS:${object_library}>)
    endforeach()
    add_library(${target} STATIC ${ARG_SOURCES} ${objects})
    target_include_directories(${target} PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/include ${DLPACK_INCLUDE_DIR})
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
    if(suffix)
      target_compile_options(${target} PRIVATE ${ATTNRES_SANITIZER_FLAGS})
      target_link_options(${target} PUBLIC ${ATTNRES_SANITIZER_FLAGS})
    endif()
    foreach(layer IN LISTS ARG_LAYERS)
      target_link_libraries(${target} PUBLIC ${layer}${suffix})
    endforeach()
    target_link_libraries(${target} PUBLIC ${ARG_LIBRARIES})
  endforeach()
endfunction()

# Device code of a layer, compiled once for every variant of it. GENCODE: the machine code it holds.
function(attnres_device_objects name)
  cmake_parse_arguments(ARG "" "" "SOURCES;GENCODE;LIBRARIES" ${ARGN})
  add_library(${name} OBJECT ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${ARG_GENCODE} -lineinfo)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE ${ATTNRES_FMT} ${ARG_LIBRARIES})
endfunction()
