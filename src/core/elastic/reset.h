// The elastic reset's pieces the context shares.
#pragma once

#include "core/config/config.h"
#include "core/elastic/elastic.h"

namespace hvd {

// An epoch's rank and size; the rest of the topology comes from every
// rank's host name at its rendezvous.
void ApplyAssignment(const ElasticMember::Assignment& a, Config* cfg);

}  // namespace hvd
