# The fault matrix's cases (see CMakeLists.txt): one test each, run by
# test_peer_fault.sh under the environment that picks the transport path.
if(NOT TARGET hvdrun)
  return()
endif()
set(_pf ${CMAKE_CURRENT_SOURCE_DIR}/test_peer_fault.sh $<TARGET_FILE:hvdrun> $<TARGET_FILE:peer_fault>)
# name; environment; fault phase collective np victim [runs]
function(hvd_peer_fault name env)
  add_test(NAME integration.core.peer_fault.${name} COMMAND ${_pf} ${ARGN})
  set_tests_properties(integration.core.peer_fault.${name} PROPERTIES TIMEOUT 240 PROCESSORS 2
                       ENVIRONMENT "${env}")
endfunction()
set(_tcp "HVD_GLOO_SHM=0;HVD_PEER_TIMEOUT=3;PEER_FAULT_MIB=4")
hvd_peer_fault(tcp_64mib_x20 "HVD_GLOO_SHM=0;PEER_FAULT_MIB=64" kill transfer allreduce 4 2 20)
hvd_peer_fault(tcp_kill_ring "${_tcp};HVD_ALGORITHM_ALLREDUCE=ring" kill transfer allreduce 4 2)
hvd_peer_fault(tcp_kill_direct "${_tcp};HVD_ALGORITHM_ALLREDUCE=direct" kill transfer allreduce 4 2)
foreach(coll allgather broadcast alltoall reducescatter)
  hvd_peer_fault(tcp_kill_${coll} "${_tcp}" kill transfer ${coll} 4 1)
endforeach()
hvd_peer_fault(tcp_kill_negotiation "${_tcp}" kill negotiation allreduce 4 2)
hvd_peer_fault(tcp_stop_transfer "${_tcp}" stop transfer allreduce 4 2)
hvd_peer_fault(tcp_stop_negotiation "${_tcp}" stop negotiation allreduce 4 2)
set(_shm "HVD_PEER_TIMEOUT=3;PEER_FAULT_MIB=4")
hvd_peer_fault(shm_kill_transfer "${_shm}" kill transfer allreduce 4 2)
hvd_peer_fault(shm_stop_transfer "${_shm}" stop transfer allreduce 4 2)
# MPI on one host: the core's shared-memory path carries the collectives.
# (Over MPI's own point-to-point, Open MPI's mpirun ends the job when a rank
# dies: the survivors are killed before they can report; docs/failures.md.)
if(TARGET hvd_transport_mpi AND MPIEXEC_EXECUTABLE)
  set(_mpi "PEER_FAULT_HVDRUN_ARGS=--transport mpi;HVD_PEER_TIMEOUT=3;PEER_FAULT_MIB=4")
  hvd_peer_fault(mpi_kill_transfer "${_mpi}" kill transfer allreduce 4 2)
  hvd_peer_fault(mpi_stop_transfer "${_mpi}" stop transfer allreduce 4 2)
endif()
