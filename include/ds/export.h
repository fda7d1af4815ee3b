/* Symbol visibility: the libraries are built with hidden visibility by default and
 * export only what is marked DS_EXPORT. */
#ifndef DATASYSTEM_EXPORT_H
#define DATASYSTEM_EXPORT_H
#if defined(__GNUC__)
#define DS_EXPORT __attribute__((visibility("default")))
#else
#define DS_EXPORT
#endif
#endif
