// Conntrack entries over ctnetlink (libnl-nf-3), for the Service proxy's cleanup after an
// endpoint change. Runs on the handle's worker thread, so in the handle's namespace.
#pragma once

#include "common.h"

namespace weft {

// Which entries to delete: every field set must match. Addresses are "" when not filtered on.
struct ConntrackFilter {
  int family = 0;        // AF_INET or AF_INET6
  int protocol = 0;      // IPPROTO_*
  std::string origDst;   // the original direction's destination (a Service address)
  int origDstPort = 0;   // 0: any port
  std::string replySrc;  // the reply direction's source (the DNAT target, an endpoint)
};

// `conntrack -D -f <family> -p <protocol> [--orig-dst ...] [--dport ...] [--reply-src ...]` for
// each filter, in one dump of the table: deletes each entry any filter matches by its tuple and
// id. An entry that expires meanwhile is not an error and not counted.
Failure conntrackDelete(const std::vector<ConntrackFilter>& filters, uint32_t& deleted);

}  // namespace weft
