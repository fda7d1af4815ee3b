/* Per-thread request context. */
#ifndef DATASYSTEM_CPP_CONTEXT_CONTEXT_H
#define DATASYSTEM_CPP_CONTEXT_CONTEXT_H

#include <string>

#include "datasystem/utils/status.h"

namespace datasystem
{

class DS_CPP_API Context
{
  public:
    /* This thread's later requests carry traceId; the worker logs it with
     * them. 1..128 bytes of [A-Za-z0-9._:-]; "" clears it. */
    static Status SetTraceId(const std::string &traceId);
    /* Records this thread's tenant id. Workers here have no tenants, so it
     * changes no request (see docs/cpp.md). */
    static void SetTenantId(const std::string &tenantId);
};

} // namespace datasystem

#endif
