/* Typed reads of a connector spec's `extra` entries. The transfer config keeps
 * every value as the text the config file had, so `port: "35000"` and
 * `port: 35000` read the same; these getters parse that text strictly and say
 * which connector and key held a bad value. */
#include "omni/connector.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"

const char *omni_spec_get(const omni_connector_spec_t *spec, const char *key)
{
    if (spec == NULL || key == NULL || spec->extra == NULL) return NULL;
    for (size_t i = spec->n_extra; i-- > 0;) {
        if (spec->extra[i].key != NULL && strcmp(spec->extra[i].key, key) == 0)
            return spec->extra[i].value;
    }
    return NULL;
}

const char *omni_spec_get_string(const omni_connector_spec_t *spec, const char *key,
                                 const char *def)
{
    const char *v = omni_spec_get(spec, key);
    return v != NULL ? v : def;
}

static ds_status_t bad_value(const omni_connector_spec_t *spec, const char *key, const char *text,
                             const char *want)
{
    return ds__set_error(DS_K_INVALID, "extra '%s' of connector '%s' is '%s', not %s", key,
                         spec->name != NULL ? spec->name : "?", text, want);
}

static bool blank(const char *s)
{
    return s[0] == '\0' || s[0] == ' ' || s[0] == '\t';
}

ds_status_t omni_spec_get_int(const omni_connector_spec_t *spec, const char *key, int64_t def,
                              int64_t *out)
{
    if (out == NULL) return ds__set_error(DS_K_INVALID, "omni_spec_get_int: out is NULL");
    const char *v = omni_spec_get(spec, key);
    if (v == NULL) {
        *out = def;
        return DS_K_OK;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (blank(v) || *end != '\0') return bad_value(spec, key, v, "an integer");
    if (errno == ERANGE) return bad_value(spec, key, v, "an integer in int64 range");
    *out = x;
    return DS_K_OK;
}

ds_status_t omni_spec_get_double(const omni_connector_spec_t *spec, const char *key, double def,
                                 double *out)
{
    if (out == NULL) return ds__set_error(DS_K_INVALID, "omni_spec_get_double: out is NULL");
    const char *v = omni_spec_get(spec, key);
    if (v == NULL) {
        *out = def;
        return DS_K_OK;
    }
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (blank(v) || *end != '\0' || isnan(x) || (errno == ERANGE && isinf(x)))
        return bad_value(spec, key, v, "a number");
    *out = x;
    return DS_K_OK;
}

ds_status_t omni_spec_get_bool(const omni_connector_spec_t *spec, const char *key, bool def,
                               bool *out)
{
    static const char *truthy[] = {"true", "yes", "on", "1"};
    static const char *falsy[] = {"false", "no", "off", "0"};
    if (out == NULL) return ds__set_error(DS_K_INVALID, "omni_spec_get_bool: out is NULL");
    const char *v = omni_spec_get(spec, key);
    if (v == NULL) {
        *out = def;
        return DS_K_OK;
    }
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(v, truthy[i]) == 0) {
            *out = true;
            return DS_K_OK;
        }
        if (strcasecmp(v, falsy[i]) == 0) {
            *out = false;
            return DS_K_OK;
        }
    }
    return bad_value(spec, key, v, "a boolean");
}
