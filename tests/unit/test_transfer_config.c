/* Unit tests for the transfer-config loader (omni/transfer_config.h) and the
 * typed spec getters: every edge of the three real vLLM-Omni sample configs,
 * both schemas in YAML and JSON, inline specs and references, SHM defaults,
 * YAML anchors and merges, and each error with the file, line, stage and edge
 * its message must name. Error-case files are written into a temp dir. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "omni/transfer_config.h"

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/omni_tcfg_%d", (int)getpid());
    return mkdir(tmpdir, 0700) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Writes text to tmpdir/name and returns the path (static storage). */
static const char *write_file(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static const char *data_path(const char *name)
{
    static char path[512];
    const char *dir = getenv("DS_TEST_DATA");
    snprintf(path, sizeof(path), "%s/%s", dir != NULL ? dir : "tests/data", name);
    return path;
}

static void expect_msg(const char *needle)
{
    if (strstr(ds_last_error(), needle) == NULL)
        fail_msg("message '%s' lacks '%s'", ds_last_error(), needle);
}

/* One expected edge; kv is key, value, key, value, ..., NULL ("~" = null). */
typedef struct {
    const char *from, *to, *name;
    const char *kv[24];
} edge_want_t;

static void check_edges(const omni_transfer_config_t *cfg, const edge_want_t *want, size_t n)
{
    assert_int_equal(omni_transfer_config_edge_count(cfg), n);
    for (size_t i = 0; i < n; i++) {
        const char *from, *to;
        const omni_connector_spec_t *spec;
        assert_int_equal(omni_transfer_config_edge_at(cfg, i, &from, &to, &spec), DS_K_OK);
        assert_string_equal(from, want[i].from);
        assert_string_equal(to, want[i].to);
        assert_string_equal(spec->name, want[i].name);
        size_t k = 0;
        while (want[i].kv[2 * k] != NULL)
            k++;
        assert_int_equal(spec->n_extra, k);
        for (size_t j = 0; j < k; j++) {
            assert_string_equal(spec->extra[j].key, want[i].kv[2 * j]);
            if (strcmp(want[i].kv[2 * j + 1], "~") == 0)
                assert_null(spec->extra[j].value);
            else
                assert_string_equal(spec->extra[j].value, want[i].kv[2 * j + 1]);
        }
        assert_ptr_equal(omni_transfer_config_find(cfg, from, to), spec);
    }
}

#define MOONCAKE_EXTRA                                                                             \
    {                                                                                              \
        "host", "127.0.0.1", "metadata_server", "http://127.0.0.1:8080/metadata", "master",        \
            "127.0.0.1:50051", "segment", "512000000", "localbuf", "64000000", "proto", "tcp",     \
            NULL                                                                                   \
    }

static void load_sample(const char *name)
{
    omni_transfer_config_t *cfg;
    assert_int_equal(omni_transfer_config_load(data_path(name), &cfg), DS_K_OK);
    const edge_want_t want[] = {
        {"0", "1", "MooncakeConnector", MOONCAKE_EXTRA},
        {"1", "2", "MooncakeConnector", MOONCAKE_EXTRA},
    };
    check_edges(cfg, want, 2);
    assert_null(omni_transfer_config_find(cfg, "0", "2"));
    assert_null(omni_transfer_config_find(cfg, "1", "0"));
    const omni_connector_spec_t *s = omni_transfer_config_find(cfg, "1", "2");
    int64_t seg;
    assert_int_equal(omni_spec_get_int(s, "segment", 0, &seg), DS_K_OK);
    assert_int_equal(seg, 512000000);
    omni_transfer_config_free(cfg);
}

static void test_sample_qwen2_5(void **state)
{
    (void)state;
    load_sample("qwen2_5_omni_multiconnector.yaml");
}

static void test_sample_qwen3(void **state)
{
    (void)state;
    load_sample("qwen3_omni_moe_multiconnector.yaml");
}

static void test_sample_dynin_new_schema(void **state)
{
    (void)state;
    load_sample("dynin_omni_multiconnector.yaml");
}

/* The spec's example: references on both ends, quoted and bare ports. */
static void test_yuanrong_references_and_inline(void **state)
{
    (void)state;
    const char *path = write_file("yr.yml", "runtime:\n"
                                            "  connectors:\n"
                                            "    connector_of_yuanrong:\n"
                                            "      name: YuanrongConnector\n"
                                            "      extra:\n"
                                            "        host: \"127.0.0.1\"\n"
                                            "        port: 31501\n"
                                            "        get_sub_timeout_ms: 1000\n"
                                            "stage_args:\n"
                                            "  - stage_id: 0\n"
                                            "    output_connectors:\n"
                                            "      to_stage_1: connector_of_yuanrong\n"
                                            "      to_stage_2:\n"
                                            "        name: YuanrongConnector\n"
                                            "        extra: {port: \"35000\", enabled: yes}\n"
                                            "  - stage_id: 1\n"
                                            "    input_connectors:\n"
                                            "      from_stage_0: connector_of_yuanrong\n"
                                            "  - stage_id: 2\n"
                                            "    input_connectors:\n"
                                            "      from_stage_0: {name: YuanrongConnector}\n");
    omni_transfer_config_t *cfg;
    assert_int_equal(omni_transfer_config_load(path, &cfg), DS_K_OK);
    const edge_want_t want[] = {
        {"0",
         "1",
         "YuanrongConnector",
         {"host", "127.0.0.1", "port", "31501", "get_sub_timeout_ms", "1000", NULL}},
        {"0", "2", "YuanrongConnector", {"port", "35000", "enabled", "yes", NULL}},
    };
    check_edges(cfg, want, 2);
    const omni_connector_spec_t *a = omni_transfer_config_find(cfg, "0", "1");
    const omni_connector_spec_t *b = omni_transfer_config_find(cfg, "0", "2");
    int64_t port;
    bool enabled;
    assert_int_equal(omni_spec_get_int(a, "port", 35001, &port), DS_K_OK);
    assert_int_equal(port, 31501);
    assert_int_equal(omni_spec_get_int(b, "port", 35001, &port), DS_K_OK);
    assert_int_equal(port, 35000);
    assert_int_equal(omni_spec_get_int(b, "get_sub_timeout_ms", 1000, &port), DS_K_OK);
    assert_int_equal(port, 1000);
    assert_int_equal(omni_spec_get_bool(b, "enabled", false, &enabled), DS_K_OK);
    assert_true(enabled);
    assert_string_equal(omni_spec_get_string(b, "host", "127.0.0.1"), "127.0.0.1");
    omni_transfer_config_free(cfg);
}

/* Edges only runtime edges or engine_input_source name get SHM. */
static void test_default_shared_memory(void **state)
{
    (void)state;
    const char *path = write_file("shm.yaml", "stage_args:\n"
                                              "  - stage_id: 0\n"
                                              "  - stage_id: 1\n"
                                              "    engine_input_source: [0]\n"
                                              "    input_connectors: ~\n"
                                              "  - stage_id: 2\n"
                                              "    engine_input_source: 1\n"
                                              "  - stage_id: 3\n"
                                              "    engine_input_source: [0, 2]\n"
                                              "    input_connectors:\n"
                                              "      from_stage_2: {name: YuanrongConnector}\n"
                                              "runtime:\n"
                                              "  edges:\n"
                                              "    - {from: 0, to: \"1\", window_size: -1}\n"
                                              "    - {from: 5}\n"
                                              "    - {from: 2, to: 4}\n");
    omni_transfer_config_t *cfg;
    assert_int_equal(omni_transfer_config_load(path, &cfg), DS_K_OK);
    const edge_want_t want[] = {
        {"2", "3", "YuanrongConnector", {NULL}},     {"0", "1", "SharedMemoryConnector", {NULL}},
        {"2", "4", "SharedMemoryConnector", {NULL}}, {"1", "2", "SharedMemoryConnector", {NULL}},
        {"0", "3", "SharedMemoryConnector", {NULL}},
    };
    check_edges(cfg, want, 5);
    omni_transfer_config_free(cfg);
}

/* The newer schema in JSON, with top-level edges, nested and null extras. */
static void test_json_new_schema(void **state)
{
    (void)state;
    const char *path = write_file(
        "new.JSON", "{\n"
                    "  \"connectors\": {\"yr\": {\"name\": \"YuanrongConnector\",\n"
                    "     \"extra\": {\"host\": \"10.0.0.1\", \"port\": 35000, \"ratio\": 0.1,\n"
                    "                \"big\": 1e20, \"on\": true, \"none\": null,\n"
                    "                \"outgoing\": {\"zmq_port\": 50051, \"host\": \"a\\\"b\"},\n"
                    "                \"ranks\": [1, \"x\", false, null]}}},\n"
                    "  \"stages\": [\n"
                    "    {\"stage_id\": 0, \"output_connectors\": {\"to_stage_1\": \"yr\"}},\n"
                    "    {\"stage_id\": 1}\n"
                    "  ],\n"
                    "  \"edges\": [{\"from\": 1, \"to\": 2}]\n"
                    "}\n");
    omni_transfer_config_t *cfg;
    assert_int_equal(omni_transfer_config_load(path, &cfg), DS_K_OK);
    const edge_want_t want[] = {
        {"0",
         "1",
         "YuanrongConnector",
         {"host", "10.0.0.1", "port", "35000", "ratio", "0.1", "big", "1e+20", "on", "true", "none",
          "~", "outgoing", "{\"zmq_port\":50051,\"host\":\"a\\\"b\"}", "ranks",
          "[1,\"x\",false,null]", NULL}},
        {"1", "2", "SharedMemoryConnector", {NULL}},
    };
    check_edges(cfg, want, 2);
    const omni_connector_spec_t *s = omni_transfer_config_find(cfg, "0", "1");
    int64_t v;
    double d;
    assert_int_equal(omni_spec_get_int(s, "none", 7, &v), DS_K_OK);
    assert_int_equal(v, 7);
    assert_int_equal(omni_spec_get_double(s, "ratio", 0, &d), DS_K_OK);
    assert_true(d == 0.1);
    omni_transfer_config_free(cfg);
}

/* Anchors, aliases and << merges, and nested extras written as JSON text. */
static void test_yaml_anchors_and_merge(void **state)
{
    (void)state;
    const char *text = "defaults: &d {host: h, port: 1, proto: tcp}\n"
                       "more: &m {proto: rdma, depth: 3}\n"
                       "connectors:\n"
                       "  c:\n"
                       "    name: MooncakeConnector\n"
                       "    extra:\n"
                       "      <<: [*d, *m]\n"
                       "      port: 2\n"
                       "      nested: {list: [1, 'two', +3, -4.5, ~, True], q: \"x\\ty\"}\n"
                       "stages:\n"
                       "  - stage_id: 0\n"
                       "    output_connectors: {to_stage_1: c}\n";
    omni_transfer_config_t *cfg;
    assert_int_equal(omni_transfer_config_parse(text, strlen(text), OMNI_CONFIG_YAML, NULL, &cfg),
                     DS_K_OK);
    const omni_connector_spec_t *s = omni_transfer_config_find(cfg, "0", "1");
    assert_non_null(s);
    assert_string_equal(omni_spec_get(s, "host"), "h");
    assert_string_equal(omni_spec_get(s, "port"), "2");    /* own key wins */
    assert_string_equal(omni_spec_get(s, "proto"), "tcp"); /* earlier source wins */
    assert_string_equal(omni_spec_get(s, "depth"), "3");
    assert_int_equal(s->n_extra, 5); /* merged keys appear once */
    assert_string_equal(s->extra[0].key, "proto");
    assert_string_equal(omni_spec_get(s, "nested"),
                        "{\"list\":[1,\"two\",3,-4.5,null,true],\"q\":\"x\\u0009y\"}");
    omni_transfer_config_free(cfg);
}

static void test_typed_getters(void **state)
{
    (void)state;
    const omni_kv_t kv[] = {{"i", "42"},
                            {"neg", "-7"},
                            {"bad", "4x"},
                            {"sp", " 1"},
                            {"big", "99999999999999999999"},
                            {"f", "2.5"},
                            {"nan", "nan"},
                            {"b1", "Yes"},
                            {"b0", "off"},
                            {"bb", "maybe"},
                            {"nul", NULL},
                            {"i", "43"},
                            {"empty", ""}};
    omni_connector_spec_t s = {"YuanrongConnector", kv, sizeof(kv) / sizeof(kv[0])};
    int64_t i;
    double d;
    bool b;
    assert_int_equal(omni_spec_get_int(&s, "i", 0, &i), DS_K_OK);
    assert_int_equal(i, 43); /* the last entry wins */
    assert_int_equal(omni_spec_get_int(&s, "neg", 0, &i), DS_K_OK);
    assert_int_equal(i, -7);
    assert_int_equal(omni_spec_get_int(&s, "absent", 35001, &i), DS_K_OK);
    assert_int_equal(i, 35001);
    assert_int_equal(omni_spec_get_int(&s, "nul", 5, &i), DS_K_OK);
    assert_int_equal(i, 5);
    assert_int_equal(omni_spec_get_int(&s, "bad", 0, &i), DS_K_INVALID);
    expect_msg("extra 'bad' of connector 'YuanrongConnector' is '4x', not an integer");
    assert_int_equal(omni_spec_get_int(&s, "sp", 0, &i), DS_K_INVALID);
    assert_int_equal(omni_spec_get_int(&s, "empty", 0, &i), DS_K_INVALID);
    assert_int_equal(omni_spec_get_int(&s, "big", 0, &i), DS_K_INVALID);
    expect_msg("int64 range");
    assert_int_equal(omni_spec_get_int(&s, "i", 0, NULL), DS_K_INVALID);
    assert_int_equal(omni_spec_get_double(&s, "f", 0, &d), DS_K_OK);
    assert_true(d == 2.5);
    assert_int_equal(omni_spec_get_double(&s, "absent", 1.5, &d), DS_K_OK);
    assert_true(d == 1.5);
    assert_int_equal(omni_spec_get_double(&s, "nan", 0, &d), DS_K_INVALID);
    expect_msg("not a number");
    assert_int_equal(omni_spec_get_double(&s, "bad", 0, &d), DS_K_INVALID);
    assert_int_equal(omni_spec_get_double(&s, "f", 0, NULL), DS_K_INVALID);
    assert_int_equal(omni_spec_get_bool(&s, "b1", false, &b), DS_K_OK);
    assert_true(b);
    assert_int_equal(omni_spec_get_bool(&s, "b0", true, &b), DS_K_OK);
    assert_false(b);
    assert_int_equal(omni_spec_get_bool(&s, "absent", true, &b), DS_K_OK);
    assert_true(b);
    assert_int_equal(omni_spec_get_bool(&s, "bb", false, &b), DS_K_INVALID);
    expect_msg("not a boolean");
    assert_int_equal(omni_spec_get_bool(&s, "b1", false, NULL), DS_K_INVALID);
    assert_null(omni_spec_get(&s, "nul"));
    assert_null(omni_spec_get(NULL, "i"));
    assert_null(omni_spec_get(&s, NULL));
    assert_string_equal(omni_spec_get_string(&s, "nul", "dflt"), "dflt");
}

/* ---- errors ---- */

static void expect_load_error(const char *name, const char *text, ds_status_t code,
                              const char *const *needles)
{
    const char *path = write_file(name, text);
    omni_transfer_config_t *cfg = (omni_transfer_config_t *)1;
    assert_int_equal(omni_transfer_config_load(path, &cfg), code);
    assert_null(cfg);
    expect_msg(path); /* every message names the file */
    for (; *needles != NULL; needles++)
        expect_msg(*needles);
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_undefined_reference(void **state)
{
    (void)state;
    expect_load_error("undef.yaml",
                      "runtime:\n"
                      "  connectors:\n"
                      "    a: {name: MooncakeConnector}\n"
                      "    b: {name: YuanrongConnector}\n"
                      "stage_args:\n"
                      "  - stage_id: 0\n"
                      "  - stage_id: 1\n"
                      "    input_connectors:\n"
                      "      from_stage_0: nope\n",
                      DS_K_INVALID,
                      NEEDLES("undef.yaml:9:", "stage 1", "edge 0->1",
                              "input_connectors.from_stage_0",
                              "undefined connector reference 'nope'", "defined: a, b"));
    expect_load_error("undef2.json",
                      "{\"stage_args\": [{\"stage_id\": 3, \"output_connectors\": "
                      "{\"to_stage_4\": \"x\"}}]}",
                      DS_K_INVALID, NEEDLES("stage 3", "edge 3->4", "reference 'x'", "none"));
}

static void test_mismatched_ends(void **state)
{
    (void)state;
    expect_load_error("mismatch.yaml",
                      "runtime:\n"
                      "  connectors:\n"
                      "    a: {name: MooncakeConnector}\n"
                      "    b: {name: YuanrongConnector}\n"
                      "stage_args:\n"
                      "  - stage_id: 0\n"
                      "    output_connectors: {to_stage_1: a}\n"
                      "  - stage_id: 1\n"
                      "    input_connectors:\n"
                      "      from_stage_0: b\n",
                      DS_K_INVALID,
                      NEEDLES("mismatch.yaml:10:", "stage 1", "edge 0->1", "connector mismatch",
                              "output_connectors of stage 0 named 'MooncakeConnector'",
                              "input_connectors of stage 1 names 'YuanrongConnector'"));
    /* Different ids naming the same connector type are fine. */
    const char *path =
        write_file("same.yaml", "runtime:\n"
                                "  connectors:\n"
                                "    a: {name: YuanrongConnector, extra: {port: 1}}\n"
                                "    b: {name: YuanrongConnector, extra: {port: 2}}\n"
                                "stage_args:\n"
                                "  - stage_id: 0\n"
                                "    output_connectors: {to_stage_1: a}\n"
                                "  - stage_id: 1\n"
                                "    input_connectors: {from_stage_0: b}\n");
    omni_transfer_config_t *cfg;
    assert_int_equal(omni_transfer_config_load(path, &cfg), DS_K_OK);
    const edge_want_t want[] = {{"0", "1", "YuanrongConnector", {"port", "1", NULL}}};
    check_edges(cfg, want, 1);
    omni_transfer_config_free(cfg);
}

static void test_file_errors(void **state)
{
    (void)state;
    omni_transfer_config_t *cfg;
    char path[512];
    snprintf(path, sizeof(path), "%s/absent.yaml", tmpdir);
    assert_int_equal(omni_transfer_config_load(path, &cfg), DS_K_NOT_FOUND);
    expect_msg("config file not found");
    expect_msg("absent.yaml");
    expect_load_error("stages.txt", "stage_args: []\n", DS_K_INVALID,
                      NEEDLES("unsupported config file type '.txt'"));
    expect_load_error("noext", "stage_args: []\n", DS_K_INVALID,
                      NEEDLES("unsupported config file type ''"));
    snprintf(path, sizeof(path), "%s/dir.yaml", tmpdir);
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(omni_transfer_config_load(path, &cfg), DS_K_IO_ERROR);
    expect_msg("is a directory");
    assert_int_equal(omni_transfer_config_load(NULL, &cfg), DS_K_INVALID);
    assert_int_equal(omni_transfer_config_load(path, NULL), DS_K_INVALID);
}

static void test_malformed_documents(void **state)
{
    (void)state;
    expect_load_error("bad.yaml", "a: 1\nb: 2\n  c: 3\n", DS_K_INVALID,
                      NEEDLES("bad.yaml:3:", "malformed YAML", "mapping values"));
    expect_load_error("bad2.yaml", "stage_args:\n  - stage_id: 0\n    x: [1, 2\n", DS_K_INVALID,
                      NEEDLES("bad2.yaml:4:", "malformed YAML"));
    expect_load_error("two.yaml", "a: 1\n---\nb: 2\n", DS_K_INVALID,
                      NEEDLES("two.yaml:3:", "single document"));
    expect_load_error("bad.json", "{\n  \"stage_args\": [\n    {\"stage_id\": 0,}\n  ]\n}\n",
                      DS_K_INVALID, NEEDLES("bad.json:3:", "malformed JSON"));
    expect_load_error("trail.json", "{}\n{}\n", DS_K_INVALID,
                      NEEDLES("trail.json:2:1", "malformed JSON"));
    expect_load_error("key.yaml", "? [a, b]\n: 1\n", DS_K_INVALID,
                      NEEDLES("key.yaml:1:", "mapping key is not a scalar"));
    expect_load_error("merge.yaml", "a:\n  <<: 5\n", DS_K_INVALID,
                      NEEDLES("merge.yaml:2:", "<< merge needs a mapping"));
    /* An alias bomb and runaway nesting stop at the limits. */
    char bomb[2048] = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
    for (char c = 'b'; c <= 'h'; c++) {
        char line[100];
        snprintf(line, sizeof(line), "%c: &%c [*%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c]\n",
                 c, c, c - 1, c - 1, c - 1, c - 1, c - 1, c - 1, c - 1, c - 1, c - 1, c - 1);
        strcat(bomb, line);
    }
    expect_load_error("bomb.yaml", bomb, DS_K_INVALID, NEEDLES("more than 1000000 nodes"));
    char deep[400] = "";
    for (int k = 0; k < 70; k++)
        strcat(deep, "[");
    expect_load_error("deep.yaml", deep, DS_K_INVALID, NEEDLES("malformed YAML"));
    char deep_ok[400] = "";
    for (int k = 0; k < 70; k++)
        strcat(deep_ok, "[");
    for (int k = 0; k < 70; k++)
        strcat(deep_ok, "]");
    expect_load_error("deep2.yaml", deep_ok, DS_K_INVALID, NEEDLES("nesting deeper than 64"));
    expect_load_error("deep.json", deep_ok, DS_K_INVALID, NEEDLES("nesting deeper than 64"));
}

static void test_shape_errors(void **state)
{
    (void)state;
    expect_load_error("top.yaml", "- 1\n- 2\n", DS_K_INVALID,
                      NEEDLES("top.yaml:1:", "top level must be a mapping, not a list"));
    expect_load_error("sa.yaml", "stage_args: {a: 1}\n", DS_K_INVALID,
                      NEEDLES("sa.yaml:1:", "'stage_args' must be a list, not a mapping"));
    expect_load_error("st.yaml", "stages: 5\n", DS_K_INVALID,
                      NEEDLES("'stages' must be a list, not a scalar"));
    expect_load_error("rt.yaml", "runtime: [1]\n", DS_K_INVALID,
                      NEEDLES("'runtime' must be a mapping"));
    expect_load_error("cn.yaml", "runtime: {connectors: [1]}\n", DS_K_INVALID,
                      NEEDLES("'connectors' must be a mapping"));
    expect_load_error("sid.yaml", "stage_args:\n  - {stage_id: 0}\n  - {name: x}\n", DS_K_INVALID,
                      NEEDLES("sid.yaml:3:", "stage_args[1] needs a scalar stage_id"));
    expect_load_error("ic.yaml", "stage_args:\n  - {stage_id: 0, input_connectors: [a]}\n",
                      DS_K_INVALID, NEEDLES("'input_connectors' must be a mapping"));
    expect_load_error("noname.yaml",
                      "stage_args:\n  - stage_id: 0\n    output_connectors:\n"
                      "      to_stage_1: {extra: {port: 1}}\n",
                      DS_K_INVALID,
                      NEEDLES("noname.yaml:4:", "edge 0->1", "has no connector name"));
    expect_load_error("defnoname.yaml",
                      "runtime: {connectors: {a: {extra: {}}}}\n"
                      "stage_args:\n  - {stage_id: 0, output_connectors: {to_stage_1: a}}\n",
                      DS_K_INVALID, NEEDLES("defnoname.yaml:1:", "has no connector name"));
    expect_load_error("extra.yaml",
                      "stage_args:\n  - stage_id: 0\n    output_connectors:\n"
                      "      to_stage_1: {name: A, extra: [1]}\n",
                      DS_K_INVALID, NEEDLES("'extra' must be a mapping, not a list"));
    expect_load_error("def.yaml",
                      "runtime: {connectors: {a: 5}}\n"
                      "stage_args:\n  - {stage_id: 0, output_connectors: {to_stage_1: a}}\n",
                      DS_K_INVALID, NEEDLES("connector 'a' must be a mapping, not a scalar"));
    expect_load_error("ref.yaml",
                      "stage_args:\n  - {stage_id: 0, output_connectors: {to_stage_1: [a]}}\n",
                      DS_K_INVALID, NEEDLES("must name a connector or give an inline"));
    expect_load_error("refnull.yaml",
                      "stage_args:\n  - {stage_id: 0, output_connectors: {to_stage_1: ~}}\n",
                      DS_K_INVALID, NEEDLES("not null"));
}

static void test_parse_api(void **state)
{
    (void)state;
    omni_transfer_config_t *cfg;
    /* Empty documents have no edges. */
    assert_int_equal(omni_transfer_config_parse("", 0, OMNI_CONFIG_YAML, "e", &cfg), DS_K_OK);
    assert_int_equal(omni_transfer_config_edge_count(cfg), 0);
    omni_transfer_config_free(cfg);
    assert_int_equal(omni_transfer_config_parse(" \n", 2, OMNI_CONFIG_JSON, "e", &cfg), DS_K_OK);
    assert_int_equal(omni_transfer_config_edge_count(cfg), 0);
    assert_int_equal(omni_transfer_config_edge_at(cfg, 0, NULL, NULL, NULL), DS_K_INVALID);
    expect_msg("out of range");
    omni_transfer_config_free(cfg);
    /* Stage ids read as vLLM-Omni's str(int): "+007" is "7". */
    const char *t = "stage_args:\n  - stage_id: +007\n    input_connectors: {from_stage_01: "
                    "{name: A}}\n";
    assert_int_equal(omni_transfer_config_parse(t, strlen(t), OMNI_CONFIG_YAML, NULL, &cfg),
                     DS_K_OK);
    const edge_want_t want[] = {{"1", "7", "A", {NULL}}};
    check_edges(cfg, want, 1);
    omni_transfer_config_free(cfg);
    assert_int_equal(omni_transfer_config_parse("a: [", 4, OMNI_CONFIG_YAML, NULL, &cfg),
                     DS_K_INVALID);
    expect_msg("<memory>:");
    assert_int_equal(omni_transfer_config_parse(t, strlen(t), (omni_config_format_t)9, "s", &cfg),
                     DS_K_INVALID);
    expect_msg("unknown config format");
    assert_int_equal(omni_transfer_config_parse(NULL, 3, OMNI_CONFIG_YAML, "s", &cfg),
                     DS_K_INVALID);
    assert_int_equal(omni_transfer_config_parse(t, strlen(t), OMNI_CONFIG_YAML, "s", NULL),
                     DS_K_INVALID);
    assert_int_equal(omni_transfer_config_edge_count(NULL), 0);
    assert_null(omni_transfer_config_find(NULL, "0", "1"));
    omni_transfer_config_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_qwen2_5),
        cmocka_unit_test(test_sample_qwen3),
        cmocka_unit_test(test_sample_dynin_new_schema),
        cmocka_unit_test(test_yuanrong_references_and_inline),
        cmocka_unit_test(test_default_shared_memory),
        cmocka_unit_test(test_json_new_schema),
        cmocka_unit_test(test_yaml_anchors_and_merge),
        cmocka_unit_test(test_typed_getters),
        cmocka_unit_test(test_undefined_reference),
        cmocka_unit_test(test_mismatched_ends),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_malformed_documents),
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_parse_api),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
