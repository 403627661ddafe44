# attnres_embed_python(SOURCE OUTPUT FUNCTION): writes OUTPUT, a C++ file defining
# `const char* FUNCTION()` that returns the text of the Python file SOURCE. The Python stays a real
# file that its tests run; CMake configures again when it changes.
function(attnres_embed_python source output function)
  file(READ ${source} text)
  string(FIND "${text}" ")PY\"" raw_string_end)
  if(NOT raw_string_end EQUAL -1)
    message(FATAL_ERROR "${source} holds )PY\", which ends the C++ raw string it is embedded in")
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${source})
  file(RELATIVE_PATH shown ${CMAKE_SOURCE_DIR} ${source})
  file(WRITE ${output}.new "// Generated from ${shown} by cmake/EmbedPython.cmake.\n"
                           "const char* ${function}() {\n  return R\"PY(${text})PY\";\n}\n")
  configure_file(${output}.new ${output} COPYONLY)
endfunction()
