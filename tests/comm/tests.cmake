# Tests of the collectives (src/comm): the bytes every collective counts against closed forms
# (comm_volume_test.py, through real multi-rank runs of loom train), and ring attention on 2, 3
# and 4 ranks against the reference attention of the whole sequence, with the bytes sent
# checked against the closed form.
add_test(NAME comm_volume COMMAND ${LOOM_PYTHON} ${CMAKE_SOURCE_DIR}/tests/comm/comm_volume_test.py $<TARGET_FILE:loom>)
set_tests_properties(comm_volume PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
loom_mpi_executable(comm_ring_attention_check ${CMAKE_CURRENT_LIST_DIR}/ring_attention_check.c)
foreach(np 2 3 4)
  loom_mpi_test(comm_ring_attention_cp${np} comm_ring_attention_check ${np} 300)
endforeach()
# Point-to-point requests polled without waiting (loom_comm_test), as the pipeline executor
# polls its sends after every block: 1 MiB each way between 2 ranks, compared exactly.
loom_mpi_executable(comm_p2p_check ${CMAKE_CURRENT_LIST_DIR}/p2p_check.c)
loom_mpi_test(comm_p2p_poll comm_p2p_check 2 120)
# Multi-node on one machine (root only: scripts/nodes.sh makes network namespaces; elsewhere the
# tests print "skipped: ..." and exit 77): dp2 x tp2, pp2 x dp2 and ZeRO-3 dp4 over 2 nodes x 2
# ranks equal one process, comm.json's inter-node bytes only on dp/pp, TCP between the nodes.
# Each test makes a set of nodes of its own (LOOM_NODES=t<pid>); the lock only spares the cores.
add_test(NAME comm_multinode COMMAND bash ${CMAKE_SOURCE_DIR}/tests/comm/multinode_test.sh $<TARGET_FILE:loom>)
set_tests_properties(comm_multinode PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
  RESOURCE_LOCK loom_nodes ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
# A link cut under a job across the nodes (root only): during a step and during a checkpoint
# write; every rank stops within parallel.timeout_s, one error names the node, the run
# directory stays sound, and --max-restarts brings the job back to the same final loss, bitwise.
add_test(NAME comm_multinode_fault COMMAND bash ${CMAKE_SOURCE_DIR}/tests/comm/multinode_fault_test.sh $<TARGET_FILE:loom>)
set_tests_properties(comm_multinode_fault PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77
  RESOURCE_LOCK loom_nodes ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
# loom's check of the job at mesh start: ranks of one MPI world given different configs or
# launch ids (an MPMD launch), or a rank started as one of N that MPI joined alone, are
# refused before any work with one error naming the rank (runs anywhere mpirun runs).
add_test(NAME comm_job_check COMMAND bash ${CMAKE_SOURCE_DIR}/tests/comm/job_check_test.sh $<TARGET_FILE:loom>)
set_tests_properties(comm_job_check PROPERTIES TIMEOUT 300 ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
# A stray job beside a running one across the nodes (root only): a second mpirun on the same
# nodes, handshakes from a stray peer, a --resume of the running run and a launch with another
# LOOM_LAUNCH_ID cannot join it or are refused, and it ends bitwise as alone; the jobs listen
# on the wildcard (Open MPI 4.1) or loopback inside the node namespaces only.
add_test(NAME comm_multinode_stray COMMAND bash ${CMAKE_SOURCE_DIR}/tests/comm/multinode_stray_test.sh $<TARGET_FILE:loom>)
set_tests_properties(comm_multinode_stray PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
  RESOURCE_LOCK loom_nodes ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
# A node that disappears for good (root only): removed under `loom train --nproc 4
# --max-restarts 1`, the supervisor gives up naming it; --resume on the node left (dp4 -> dp2,
# the global batch kept) follows the uninterrupted run within 1e-5; dp alone halves the batch.
add_test(NAME comm_multinode_node_lost COMMAND bash ${CMAKE_SOURCE_DIR}/tests/comm/multinode_node_lost_test.sh $<TARGET_FILE:loom>)
set_tests_properties(comm_multinode_node_lost PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
  RESOURCE_LOCK loom_nodes ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
# loom sweep --launcher slurm through a slurmctld and one slurmd per node namespace (root, with
# slurm-wlm and munge): a dp4 point across both nodes via srun/PMIx, bitwise the same as mpirun.
add_test(NAME comm_multinode_slurm COMMAND bash ${CMAKE_SOURCE_DIR}/tests/comm/multinode_slurm_test.sh $<TARGET_FILE:loom>)
set_tests_properties(comm_multinode_slurm PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
  RESOURCE_LOCK loom_nodes ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
# loom-netdelay's refusals of bad arguments (runs anywhere; the delay itself: comm_multinode)
add_test(NAME comm_netdelay_args COMMAND bash ${CMAKE_SOURCE_DIR}/tests/comm/netdelay_args_test.sh $<TARGET_FILE:loom-netdelay>)
