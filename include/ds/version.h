/* Version of the datasystem client library and wire protocol. The build reads
 * DS_VERSION_* from this file; the shared library's soname is the major version. */
#ifndef DATASYSTEM_VERSION_H
#define DATASYSTEM_VERSION_H

#define DS_VERSION_MAJOR 0
#define DS_VERSION_MINOR 1
#define DS_VERSION_PATCH 0
#define DS_VERSION_STRING "0.1.0"

#endif
