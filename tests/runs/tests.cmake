# Tests of the runs area (src/runs):
#   runs_serve   `loom runs serve` end to end: the JSON API against the CLI on real tiny runs
#                and a sweep, CLI errors, and the page in headless Chromium (Debian chromium +
#                python3-websocket): no console errors, rows = `loom runs`, plotted points =
#                metrics.jsonl, a running run's curve grows; screenshot in the build directory
add_test(NAME runs_serve COMMAND bash ${CMAKE_SOURCE_DIR}/tests/runs/serve_test.sh $<TARGET_FILE:loom>
         ${CMAKE_BINARY_DIR}/runs_serve_screenshot.png)
set_tests_properties(runs_serve PROPERTIES TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive")
#   runs_diff_test  loom runs diff (tp2/dp2 vs one process: 0, lr: 1, bad input: 2, step sets,
#                   allclose semantics, plot) and loom ckpt compare on the same runs
add_test(NAME runs_diff_test COMMAND bash ${CMAKE_SOURCE_DIR}/tests/runs/runs_diff_test.sh $<TARGET_FILE:loom>)
set_tests_properties(runs_diff_test PROPERTIES TIMEOUT 120
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive")
#   runs_cli_test   `loom runs` as a new user meets it: no registry yet (exit 0, where it looked),
#                   --out/--output/-o for plot and diff, subcommands' own help, no "(default )"
#                   in runs show, columns chosen by what varies (a 100-column terminal)
add_test(NAME runs_cli_test COMMAND bash ${CMAKE_SOURCE_DIR}/tests/runs/runs_cli_test.sh $<TARGET_FILE:loom>)
set_tests_properties(runs_cli_test PROPERTIES TIMEOUT 120
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive")
#   runs_dashboard_metrics  the dashboard in headless Chromium at 1400 px: the table in a
#                   screenshot / DOM dump taken at load with Chromium's defaults, every run in
#                   view plotted without ticking, the metric picker (lr, grad_norm, aux_loss, ...)
#                   draws the metrics.jsonl points, metric columns in sight, a loading state,
#                   sweeps under ./logs found by default; screenshot in the build directory
add_test(NAME runs_dashboard_metrics COMMAND bash ${CMAKE_SOURCE_DIR}/tests/runs/dashboard_metrics_test.sh
         $<TARGET_FILE:loom> ${CMAKE_BINARY_DIR}/runs_dashboard_metrics_screenshot.png)
set_tests_properties(runs_dashboard_metrics PROPERTIES TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive")
