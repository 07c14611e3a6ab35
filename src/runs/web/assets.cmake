# The dashboard page (src/runs/web/*.html|js|css) compiled into libloom as byte arrays by
# embed.cmake whenever a page file changes; included from the top-level CMakeLists.txt.
file(GLOB LOOM_WEB_FILES CONFIGURE_DEPENDS RELATIVE ${CMAKE_SOURCE_DIR}/src/runs/web
     ${CMAKE_SOURCE_DIR}/src/runs/web/*.html ${CMAKE_SOURCE_DIR}/src/runs/web/*.js
     ${CMAKE_SOURCE_DIR}/src/runs/web/*.css)
list(SORT LOOM_WEB_FILES)
set(LOOM_WEB_DEPS ${LOOM_WEB_FILES})
list(TRANSFORM LOOM_WEB_DEPS PREPEND ${CMAKE_SOURCE_DIR}/src/runs/web/)
set(LOOM_WEB_OUT ${CMAKE_BINARY_DIR}/generated/serve_assets_data.c)
add_custom_command(OUTPUT ${LOOM_WEB_OUT}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/generated
  COMMAND ${CMAKE_COMMAND} -DDIR=${CMAKE_SOURCE_DIR}/src/runs/web "-DFILES=${LOOM_WEB_FILES}"
          -DOUT=${LOOM_WEB_OUT} -P ${CMAKE_SOURCE_DIR}/src/runs/web/embed.cmake
  DEPENDS ${LOOM_WEB_DEPS} ${CMAKE_SOURCE_DIR}/src/runs/web/embed.cmake
  COMMENT "Embedding the dashboard page (src/runs/web) into libloom" VERBATIM)
target_sources(loomlib PRIVATE ${LOOM_WEB_OUT})
