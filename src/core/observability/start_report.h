// Start-up progress for a launcher that cannot see it itself.
//
// Under `hvdrun --transport mpi`, mpirun starts the ranks and MPI forms the
// job: no rank connects to hvdrun's rendezvous store, and a rank that never
// calls hvd_init leaves the others blocked inside MPI_Init_thread, where no
// timeout of the library's can end them. So hvdrun enforces the start timeout
// itself, from what each rank reports to a store it serves for this alone
// (launcher/mpi_delegate.h):
//   start/<world rank>   hvd_init began (before the transport is opened)
//   ready/<world rank>   the transport is up
// each with the value "<host name> <pid>". hvdrun passes the store's address
// and secret as HVD_START_REPORT_ADDR and HVD_START_REPORT_SECRET; these are
// a protocol between the two, not settings, so they are read here rather than
// with the configuration. The world rank is Open MPI's (OMPI_COMM_WORLD_RANK,
// else PMIX_RANK): a context over a sub-communicator still reports the
// process. Each stage is reported once per process, best effort: failing to
// reach hvdrun is logged and never fails hvd_init.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "core/observability/logging.h"
#include "rendezvous/store.h"

namespace hvd {

enum class StartStage { kStarted, kReady };

void ReportStartStage(StartStage stage, const std::string& hostname, const Logger& log);

// A client of that store (HVD_START_REPORT_ADDR), for the ranks' metrics
// reports (metrics_publish.h) when the job has no store of its own; null
// when the variable is not set.
Result<std::unique_ptr<rdv::StoreClient>> ConnectStartReportStore();

}  // namespace hvd
