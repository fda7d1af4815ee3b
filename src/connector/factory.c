/* The connector factory: a process-wide registry from connector name to
 * constructor, like vLLM-Omni's OmniConnectorFactory. The built-in table is
 * registered once, before the first factory call; a mutex guards the
 * registry, and constructors run outside it so a slow one (connecting to a
 * worker) does not hold up other threads. */
#include "omni/connector.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "common/error.h"
#include "connector/builtins.h"

typedef struct {
    char *name;
    omni_connector_ctor_t ctor;
    void *user;
} entry_t;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;
static entry_t *entries;
static size_t n_entries, cap_entries;

static ssize_t do_find(const char *name)
{
    for (size_t i = 0; i < n_entries; i++) {
        if (strcmp(entries[i].name, name) == 0) return (ssize_t)i;
    }
    return -1;
}

/* Runs with registry_lock held. */
static ds_status_t do_register(const char *name, omni_connector_ctor_t ctor, void *user)
{
    if (do_find(name) >= 0)
        return ds__set_error(DS_K_DUPLICATED, "connector '%s' is already registered", name);
    if (n_entries == cap_entries) {
        size_t cap = cap_entries ? cap_entries * 2 : 8;
        entry_t *e = realloc(entries, cap * sizeof(*e));
        if (e == NULL)
            return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory registering '%s'", name);
        entries = e;
        cap_entries = cap;
    }
    char *copy = strdup(name);
    if (copy == NULL)
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory registering '%s'", name);
    entries[n_entries++] = (entry_t){copy, ctor, user};
    return DS_K_OK;
}

static void register_builtins(void)
{
    pthread_mutex_lock(&registry_lock);
    for (const omni__builtin_t *b = omni__builtins; b->name != NULL; b++)
        do_register(b->name, b->ctor, NULL);
    pthread_mutex_unlock(&registry_lock);
}

static void lock_registry(void)
{
    pthread_once(&builtins_once, register_builtins);
    pthread_mutex_lock(&registry_lock);
}

ds_status_t omni_factory_register(const char *name, omni_connector_ctor_t ctor, void *user)
{
    if (name == NULL || name[0] == '\0' || ctor == NULL)
        return ds__set_error(DS_K_INVALID, "omni_factory_register: a name and constructor are "
                                           "required");
    lock_registry();
    ds_status_t st = do_register(name, ctor, user);
    pthread_mutex_unlock(&registry_lock);
    return st;
}

ds_status_t omni_factory_unregister(const char *name)
{
    if (name == NULL) return ds__set_error(DS_K_INVALID, "omni_factory_unregister: name is NULL");
    lock_registry();
    ssize_t i = do_find(name);
    ds_status_t st = DS_K_OK;
    if (i < 0) {
        st = ds__set_error(DS_K_NOT_FOUND, "connector '%s' is not registered", name);
    } else {
        free(entries[i].name);
        memmove(&entries[i], &entries[i + 1], (n_entries - (size_t)i - 1) * sizeof(*entries));
        n_entries--;
    }
    pthread_mutex_unlock(&registry_lock);
    return st;
}

bool omni_factory_is_registered(const char *name)
{
    if (name == NULL) return false;
    lock_registry();
    bool found = do_find(name) >= 0;
    pthread_mutex_unlock(&registry_lock);
    return found;
}

/* Runs with registry_lock held. */
static size_t do_list(char *buf, size_t cap)
{
    size_t pos = 0;
    if (cap > 0) buf[0] = '\0';
    for (size_t i = 0; i < n_entries && buf != NULL; i++) {
        if (pos >= cap) break;
        int n = snprintf(buf + pos, cap - pos, "%s%s", i > 0 ? ", " : "", entries[i].name);
        if (n < 0) break;
        pos += (size_t)n;
    }
    return n_entries;
}

size_t omni_factory_list(char *buf, size_t cap)
{
    lock_registry();
    size_t n = do_list(buf, cap);
    pthread_mutex_unlock(&registry_lock);
    return n;
}

ds_status_t omni_factory_create(const omni_connector_spec_t *spec, omni_connector_t **out)
{
    if (out == NULL) return ds__set_error(DS_K_INVALID, "omni_factory_create: out is NULL");
    *out = NULL;
    if (spec == NULL || spec->name == NULL || spec->name[0] == '\0')
        return ds__set_error(DS_K_INVALID, "omni_factory_create: the spec has no name");
    if (spec->n_extra > 0 && spec->extra == NULL)
        return ds__set_error(DS_K_INVALID,
                             "omni_factory_create: spec '%s' has %zu extras but "
                             "no array",
                             spec->name, spec->n_extra);
    lock_registry();
    ssize_t i = do_find(spec->name);
    if (i < 0) {
        char names[384];
        size_t n = do_list(names, sizeof(names));
        pthread_mutex_unlock(&registry_lock);
        return ds__set_error(DS_K_NOT_FOUND, "unknown connector '%s'; registered: %s", spec->name,
                             n > 0 ? names : "(none)");
    }
    omni_connector_ctor_t ctor = entries[i].ctor;
    void *user = entries[i].user;
    pthread_mutex_unlock(&registry_lock);

    ds__clear_error();
    omni_connector_t *c = NULL;
    ds_status_t st = ctor(spec, user, &c);
    if (st != DS_K_OK) {
        char cause[384];
        snprintf(cause, sizeof(cause), "%s",
                 ds_last_error()[0] != '\0' ? ds_last_error() : ds_status_message(st));
        return ds__set_error(st, "failed to create connector %s: %s", spec->name, cause);
    }
    if (c == NULL)
        return ds__set_error(DS_K_RUNTIME_ERROR,
                             "failed to create connector %s: the constructor "
                             "returned no connector",
                             spec->name);
    *out = c;
    return DS_K_OK;
}
