/* libFuzzer target for the transfer-config loader (src/connector,
 * include/omni/transfer_config.h). Byte 0 picks the format (bit 0: JSON,
 * else YAML) and whether the text also goes through a temporary file and
 * omni_transfer_config_load (bit 1); the rest is the document. A config that
 * loads must be self-consistent: every edge is found again by its two stage
 * ids, and every spec has a name and readable extra entries. */
#include "omni/transfer_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_transfer_config: check failed: %s (line %d)\n", #cond,           \
                    __LINE__);                                                                     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk(const omni_transfer_config_t *cfg)
{
    size_t n = omni_transfer_config_edge_count(cfg);
    for (size_t i = 0; i < n; i++) {
        const char *from = NULL, *to = NULL;
        const omni_connector_spec_t *spec = NULL;
        CHECK(omni_transfer_config_edge_at(cfg, i, &from, &to, &spec) == DS_K_OK);
        CHECK(from != NULL && to != NULL && spec != NULL);
        CHECK(spec->name != NULL && spec->name[0] != '\0');
        CHECK(spec->n_extra == 0 || spec->extra != NULL);
        for (size_t k = 0; k < spec->n_extra; k++) {
            CHECK(spec->extra[k].key != NULL);
            (void)strlen(spec->extra[k].key);
            if (spec->extra[k].value) (void)strlen(spec->extra[k].value);
            (void)omni_spec_get(spec, spec->extra[k].key);
            int64_t iv;
            double dv;
            bool bv;
            (void)omni_spec_get_int(spec, spec->extra[k].key, 0, &iv);
            (void)omni_spec_get_double(spec, spec->extra[k].key, 0, &dv);
            (void)omni_spec_get_bool(spec, spec->extra[k].key, false, &bv);
        }
        const omni_connector_spec_t *found = omni_transfer_config_find(cfg, from, to);
        CHECK(found != NULL);
        CHECK(strcmp(found->name, spec->name) == 0);
    }
    const char *f, *t;
    const omni_connector_spec_t *s;
    CHECK(omni_transfer_config_edge_at(cfg, n, &f, &t, &s) == DS_K_INVALID);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t ctl = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    omni_config_format_t fmt = (ctl & 1) ? OMNI_CONFIG_JSON : OMNI_CONFIG_YAML;
    omni_transfer_config_t *cfg = NULL;
    ds_status_t st = omni_transfer_config_parse(text, len, fmt, "fuzz", &cfg);
    size_t nedges = 0;
    if (st == DS_K_OK) {
        CHECK(cfg != NULL);
        walk(cfg);
        nedges = omni_transfer_config_edge_count(cfg);
    } else {
        CHECK(cfg == NULL);
        CHECK(ds_last_error() != NULL && ds_last_error()[0] != '\0');
    }
    omni_transfer_config_free(cfg);

    if (ctl & 2) {
        char path[64];
        snprintf(path, sizeof(path), "/tmp/ds-fuzz-cfg-XXXXXX%s", fmt ? ".json" : ".yaml");
        int fd = mkstemps(path, 5);
        CHECK(fd >= 0);
        CHECK(write(fd, text, len) == (ssize_t)len);
        close(fd);
        omni_transfer_config_t *cfg2 = NULL;
        ds_status_t st2 = omni_transfer_config_load(path, &cfg2);
        unlink(path);
        /* The file holds the same text, so it must load the same way. */
        CHECK(st2 == st);
        if (st2 == DS_K_OK) {
            CHECK(omni_transfer_config_edge_count(cfg2) == nedges);
            walk(cfg2);
        }
        omni_transfer_config_free(cfg2);
    }
    return 0;
}
