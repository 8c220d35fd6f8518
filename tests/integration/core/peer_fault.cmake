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
# UCX (PEER_FAULT_HVDRUN_ARGS picks it), every byte through UCX (HVD_SHM=0):
# over TCP (UCX_TLS=tcp,self) and over UCX's own shared memory. Each
# survivor learns of the death from its endpoint's error callback or a
# peer's abort message (docs/failures.md). 64 MiB over UCX's shared memory
# takes 10 s a run here: its case (0.3-0.6 s) is left to docs/failures.md.
if(TARGET hvd_transport_ucx)
  set(_ucx "PEER_FAULT_HVDRUN_ARGS=--transport ucx;HVD_SHM=0;HVD_PEER_TIMEOUT=3;PEER_FAULT_MIB=4")
  set(_ucx_tcp "${_ucx};UCX_TLS=tcp,self")
  hvd_peer_fault(ucx_tcp_64mib_x2 "PEER_FAULT_HVDRUN_ARGS=--transport ucx;HVD_SHM=0;UCX_TLS=tcp,self;PEER_FAULT_MIB=64"
                 kill transfer allreduce 4 2 2)
  hvd_peer_fault(ucx_tcp_kill_ring "${_ucx_tcp};HVD_ALGORITHM_ALLREDUCE=ring" kill transfer allreduce 4 2)
  hvd_peer_fault(ucx_tcp_kill_direct "${_ucx_tcp};HVD_ALGORITHM_ALLREDUCE=direct" kill transfer allreduce 4 2)
  foreach(coll allgather broadcast)
    hvd_peer_fault(ucx_tcp_kill_${coll} "${_ucx_tcp}" kill transfer ${coll} 4 1)
  endforeach()
  hvd_peer_fault(ucx_tcp_kill_negotiation "${_ucx_tcp}" kill negotiation allreduce 4 2)
  hvd_peer_fault(ucx_tcp_stop_transfer "${_ucx_tcp}" stop transfer allreduce 4 2)
  hvd_peer_fault(ucx_shm_kill_transfer_x3 "${_ucx}" kill transfer allreduce 4 2 3)
  hvd_peer_fault(ucx_shm_stop_transfer "${_ucx}" stop transfer allreduce 4 2)
endif()
