/* Symbol visibility for libomniconn. The connector library is built, like the
 * datasystem libraries, with hidden visibility by default; OMNI_EXPORT marks the
 * public API so only it appears in the shared object's dynamic symbol table. */
#ifndef OMNI_EXPORT_H
#define OMNI_EXPORT_H

#include "ds/export.h"

#define OMNI_EXPORT DS_EXPORT

#endif
