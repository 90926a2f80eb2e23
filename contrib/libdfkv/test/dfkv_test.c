/*
 * dfkv_test.c — checks libdfkv.so through the hand-written dfkv.h against
 * real dfkv server processes. Built with -Wall -Werror by
 * scripts/test-contrib.sh:
 *
 *   dfkv_test MEMBERS
 *
 * MEMBERS is the comma-separated host:port list of running nodes. Exits 0
 * when every check passed, 1 (after printing each failure) otherwise.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "dfkv.h"

static int failures;

static void report(const char* file, int line, const char* what, dfkv_client* c) {
    char msg[512];
    dfkv_last_error(c, msg, sizeof msg);
    fprintf(stderr, "%s:%d: FAILED: %s (last error: %s)\n", file, line, what, msg);
    failures++;
}

#define CHECK(cond, c) do { if (!(cond)) report(__FILE__, __LINE__, #cond, (c)); } while (0)
#define CHECK_RC(expr, want, c) do { \
    int rc_ = (expr); \
    if (rc_ != (want)) { \
        char what_[256]; \
        snprintf(what_, sizeof what_, "%s returned %s (%d), want %s", #expr, \
                 dfkv_status_name(rc_), rc_, dfkv_status_name(want)); \
        report(__FILE__, __LINE__, what_, (c)); \
    } \
} while (0)

static const char ns[] = "dfkv-c-test\0namespace";

static dfkv_client* open_client(const char* members) {
    dfkv_client_options_v2 o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.members = members;
    o.namespace_ptr = ns;
    o.namespace_len = sizeof ns - 1; /* the NUL inside is identity, the trailing one is not */
    o.timeout_ms = 5000;
    dfkv_client* c = NULL;
    int rc = dfkv_open_v2(&o, &c);
    if (rc != DFKV_OK || c == NULL) {
        char msg[512];
        dfkv_last_error(NULL, msg, sizeof msg);
        fprintf(stderr, "dfkv_open_v2: %s: %s\n", dfkv_status_name(rc), msg);
        exit(1);
    }
    return c;
}

static void test_open_options(const char* members) {
    dfkv_client_options_v2 o;
    dfkv_client* c = (dfkv_client*)0x1;
    char msg[512];

    /* struct_size smaller than v2 as first published: rejected, *out
     * reset to NULL. */
    memset(&o, 0, sizeof o);
    o.members = members;
    o.namespace_ptr = ns;
    o.namespace_len = 3;
    o.struct_size = offsetof(dfkv_client_options_v2, shm) - 8;
    CHECK_RC(dfkv_open_v2(&o, &c), DFKV_INVALID, NULL);
    CHECK(c == NULL, NULL);
    dfkv_last_error(NULL, msg, sizeof msg);
    CHECK(strstr(msg, "struct_size") != NULL, NULL);
    o.struct_size = 0;
    CHECK_RC(dfkv_open_v2(&o, &c), DFKV_INVALID, NULL);

    /* A caller built before shm was appended: its size ends at
     * max_block_bytes, and it opens. */
    o.struct_size = offsetof(dfkv_client_options_v2, shm);
    CHECK_RC(dfkv_open_v2(&o, &c), DFKV_OK, NULL);
    CHECK_RC(dfkv_close(c), DFKV_OK, NULL);
    /* shm: a mode that does not exist, or reserved bits: INVALID. */
    o.struct_size = sizeof o;
    o.shm = 3;
    CHECK_RC(dfkv_open_v2(&o, &c), DFKV_INVALID, NULL);
    o.shm = DFKV_SHM_OFF;
    o.reserved0 = 1;
    CHECK_RC(dfkv_open_v2(&o, &c), DFKV_INVALID, NULL);
    o.reserved0 = 0;
    o.shm = DFKV_SHM_AUTO;
    o.struct_size = 0;

    /* A larger struct from a newer caller: fine while the unknown tail is
     * zero, UNSUPPORTED when it asks for something. */
    struct {
        dfkv_client_options_v2 v2;
        uint64_t future_field;
    } big;
    memset(&big, 0, sizeof big);
    big.v2 = o;
    big.v2.struct_size = sizeof big;
    CHECK_RC(dfkv_open_v2(&big.v2, &c), DFKV_OK, NULL);
    CHECK(c != NULL, NULL);
    CHECK_RC(dfkv_close(c), DFKV_OK, NULL);
    big.future_field = 7;
    CHECK_RC(dfkv_open_v2(&big.v2, &c), DFKV_UNSUPPORTED, NULL);
    CHECK(c == NULL, NULL);

    /* MDS discovery: an unreachable MDS fails the open (it asks for the
     * members first), with *out NULL and a message naming the MDS. */
    o.struct_size = sizeof o;
    o.members = NULL;
    o.mds_addrs = "127.0.0.1:1";
    o.timeout_ms = 2000;
    int rc = dfkv_open_v2(&o, &c);
    CHECK(rc != DFKV_OK && c == NULL, NULL);
    dfkv_last_error(NULL, msg, sizeof msg);
    CHECK(strstr(msg, "MDS") != NULL, NULL);
    /* Both membership forms, or a group without an MDS: INVALID. */
    o.members = members;
    CHECK_RC(dfkv_open_v2(&o, &c), DFKV_INVALID, NULL);
    o.mds_addrs = NULL;
    o.group = "g";
    CHECK_RC(dfkv_open_v2(&o, &c), DFKV_INVALID, NULL);
    o.group = NULL;
    o.members = NULL;

    /* No members, no namespace, NULL arguments. */
    o.mds_addrs = NULL;
    CHECK_RC(dfkv_open_v2(&o, &c), DFKV_INVALID, NULL);
    o.members = members;
    o.namespace_len = 0;
    CHECK_RC(dfkv_open_v2(&o, &c), DFKV_INVALID, NULL);
    CHECK_RC(dfkv_open_v2(NULL, &c), DFKV_INVALID, NULL);
    o.namespace_len = 3;
    CHECK_RC(dfkv_open_v2(&o, NULL), DFKV_INVALID, NULL);
}

/* The token option against the open nodes this program is given (nodes
 * with credentials are tested in libdfkv_test.go): a well-formed token is
 * accepted by a node without credentials; a malformed one fails the open
 * with DFKV_INVALID and a message that names the setting, not the token;
 * a caller built before the field was appended still opens. */
static void test_token(const char* members) {
    static const char good[] = "c-test-token-0123456789abcdef";
    static const char bad[] = "shortsecret";
    dfkv_client_options_v2 o;
    dfkv_client* c = NULL;
    char msg[512];
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.members = members;
    o.namespace_ptr = ns;
    o.namespace_len = sizeof ns - 1;
    o.token = good;
    CHECK_RC(dfkv_open_v2(&o, &c), DFKV_OK, NULL);
    if (c != NULL) {
        static const char key[] = "token-key";
        char buf[16];
        uint64_t stored = 0;
        CHECK_RC(dfkv_put(c, key, sizeof key - 1, "v", 1), DFKV_OK, c);
        CHECK_RC(dfkv_get(c, key, sizeof key - 1, buf, sizeof buf, &stored), DFKV_OK, c);
        CHECK(stored == 1 && buf[0] == 'v', c);
        CHECK_RC(dfkv_remove(c, key, sizeof key - 1), DFKV_OK, c);
        CHECK_RC(dfkv_close(c), DFKV_OK, NULL);
    }
    o.token = bad;
    CHECK_RC(dfkv_open_v2(&o, &c), DFKV_INVALID, NULL);
    CHECK(c == NULL, NULL);
    dfkv_last_error(NULL, msg, sizeof msg);
    CHECK(strstr(msg, "dfkv_client_options_v2.token") != NULL, NULL);
    CHECK(strstr(msg, bad) == NULL, NULL);
    /* A struct that ends before the token: the field reads as NULL. */
    o.struct_size = offsetof(dfkv_client_options_v2, token);
    CHECK_RC(dfkv_open_v2(&o, &c), DFKV_OK, NULL);
    CHECK_RC(dfkv_close(c), DFKV_OK, NULL);
    CHECK(strcmp(dfkv_status_name(DFKV_UNAUTHENTICATED), "UNAUTHENTICATED") == 0, NULL);
    CHECK(strcmp(dfkv_status_name(DFKV_FORBIDDEN), "FORBIDDEN") == 0, NULL);
}

/* The TLS fields sit after token at their natural alignment: a caller's
 * struct and the library's agree on every offset. */
_Static_assert(offsetof(dfkv_client_options_v2, tls) == offsetof(dfkv_client_options_v2, token) + sizeof(const char*),
               "tls follows token");
_Static_assert(offsetof(dfkv_client_options_v2, tls_ca_file) % sizeof(void*) == 0, "tls_ca_file is aligned");
_Static_assert(sizeof(dfkv_client_options_v2) == offsetof(dfkv_client_options_v2, tls_server_name) + sizeof(const char*),
               "no tail padding");

static const char* const tls_env[] = {"DFKV_CLIENT_TLS", "DFKV_CLIENT_TLS_CA", "DFKV_CLIENT_TLS_CERT",
                                      "DFKV_CLIENT_TLS_KEY", "DFKV_CLIENT_TLS_SERVER_NAME"};

/* Opens o, puts one value and closes; returns the put's status (the
 * open's when it fails) and leaves the last error in msg. */
static int tls_put(dfkv_client_options_v2* o, char* msg, size_t cap) {
    static const char key[] = "tls-key";
    dfkv_client* c = NULL;
    int rc = dfkv_open_v2(o, &c);
    if (rc != DFKV_OK) {
        dfkv_last_error(NULL, msg, cap);
        return rc;
    }
    rc = dfkv_put(c, key, sizeof key - 1, "v", 1);
    dfkv_last_error(c, msg, cap);
    if (rc == DFKV_OK) {
        CHECK_RC(dfkv_remove(c, key, sizeof key - 1), DFKV_OK, c);
    }
    CHECK_RC(dfkv_close(c), DFKV_OK, NULL);
    return rc;
}

/* The TLS fields against the plaintext nodes this program is given
 * (round trips over TLS, wrong CAs and mutual TLS are tested against
 * nodes serving TLS in libdfkv_test.go and contrib/python/tests): a TLS
 * client of a plaintext node is told the node does not speak TLS, from
 * the field or from $DFKV_CLIENT_TLS, read at open through getenv;
 * DFKV_TLS_OFF overrides the environment; bad values, half a client
 * certificate and unreadable files fail the open with DFKV_INVALID naming
 * the field and the path; a caller built before the fields still opens. */
static void test_tls(const char* members) {
    static const char missing[] = "/nonexistent/dfkv-test-ca.pem";
    dfkv_client_options_v2 o;
    char msg[1024];
    size_t i;
    for (i = 0; i < sizeof tls_env / sizeof tls_env[0]; i++) {
        unsetenv(tls_env[i]);
    }
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.members = members;
    o.namespace_ptr = ns;
    o.namespace_len = sizeof ns - 1;
    o.timeout_ms = 5000;
    o.shm = DFKV_SHM_OFF;

    /* Plaintext by default. */
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_OK, NULL);
    /* TLS from the field, then from the environment: the nodes do not
     * speak it. */
    o.tls = DFKV_TLS_ON;
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_EPOCH_MISMATCH, NULL);
    CHECK(strstr(msg, "does not speak TLS") != NULL, NULL);
    CHECK(strstr(msg, "dfkv_client_options_v2.tls") != NULL, NULL);
    o.tls = DFKV_TLS_ENV;
    setenv("DFKV_CLIENT_TLS", "1", 1);
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_EPOCH_MISMATCH, NULL);
    CHECK(strstr(msg, "does not speak TLS") != NULL && strstr(msg, "$DFKV_CLIENT_TLS") != NULL, NULL);
    /* The field wins over the environment. */
    o.tls = DFKV_TLS_OFF;
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_OK, NULL);
    /* A caller built before the TLS fields: they read as DFKV_TLS_ENV and
     * NULL whatever lies past its struct_size, so the environment
     * decides. */
    o.tls = 7;
    o.reserved1 = 7;
    o.tls_ca_file = missing;
    o.struct_size = offsetof(dfkv_client_options_v2, tls);
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_EPOCH_MISMATCH, NULL);
    unsetenv("DFKV_CLIENT_TLS");
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_OK, NULL);
    o.struct_size = sizeof o;
    o.reserved1 = 0;

    /* Values that mean nothing. */
    o.tls_ca_file = NULL;
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_INVALID, NULL); /* tls = 7 */
    CHECK(strstr(msg, "tls is 7") != NULL, NULL);
    o.tls = DFKV_TLS_ON;
    o.reserved1 = 1;
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_INVALID, NULL);
    CHECK(strstr(msg, "reserved1") != NULL, NULL);
    o.reserved1 = 0;
    o.tls = DFKV_TLS_ENV;
    setenv("DFKV_CLIENT_TLS", "maybe", 1);
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_INVALID, NULL);
    CHECK(strstr(msg, "DFKV_CLIENT_TLS") != NULL && strstr(msg, "maybe") != NULL, NULL);
    unsetenv("DFKV_CLIENT_TLS");

    /* Files: unreadable, half a client certificate, or given with TLS
     * off. */
    o.tls = DFKV_TLS_ON;
    o.tls_ca_file = missing;
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_INVALID, NULL);
    CHECK(strstr(msg, missing) != NULL && strstr(msg, "tls_ca_file") != NULL, NULL);
    o.tls_ca_file = NULL;
    setenv("DFKV_CLIENT_TLS_CA", missing, 1);
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_INVALID, NULL);
    CHECK(strstr(msg, missing) != NULL && strstr(msg, "$DFKV_CLIENT_TLS_CA") != NULL, NULL);
    unsetenv("DFKV_CLIENT_TLS_CA");
    o.tls_ca_file = "";
    o.tls_cert_file = missing;
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_INVALID, NULL);
    CHECK(strstr(msg, "tls_cert_file") != NULL && strstr(msg, "tls_key_file") != NULL, NULL);
    o.tls_cert_file = NULL;
    o.tls_key_file = missing;
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_INVALID, NULL);
    CHECK(strstr(msg, "tls_cert_file") != NULL && strstr(msg, "tls_key_file") != NULL, NULL);
    o.tls_cert_file = missing;
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_INVALID, NULL);
    CHECK(strstr(msg, missing) != NULL, NULL);
    o.tls_cert_file = o.tls_key_file = NULL;
    o.tls = DFKV_TLS_ENV;
    o.tls_server_name = "localhost";
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_INVALID, NULL);
    CHECK(strstr(msg, "tls_server_name is set but TLS is off") != NULL, NULL);
    o.tls = DFKV_TLS_OFF;
    CHECK_RC(tls_put(&o, msg, sizeof msg), DFKV_OK, NULL);
}

static void test_scalar(dfkv_client* c) {
    const char key[] = "scalar-key";
    const char val[] = "hello, dfkv";
    char buf[64];
    uint64_t stored = 99, nread = 99;

    CHECK_RC(dfkv_put(c, key, sizeof key - 1, val, sizeof val - 1), DFKV_OK, c);
    CHECK_RC(dfkv_get(c, key, sizeof key - 1, buf, sizeof buf, &stored), DFKV_OK, c);
    CHECK(stored == sizeof val - 1 && memcmp(buf, val, stored) == 0, c);
    CHECK_RC(dfkv_exist(c, key, sizeof key - 1, &stored), DFKV_OK, c);
    CHECK(stored == sizeof val - 1, c);
    CHECK_RC(dfkv_exist(c, key, sizeof key - 1, NULL), DFKV_OK, c);

    /* Buffer too small: prefix copied, stored length reported. */
    memset(buf, 0, sizeof buf);
    CHECK_RC(dfkv_get(c, key, sizeof key - 1, buf, 5, &stored), DFKV_TOO_LARGE, c);
    CHECK(stored == sizeof val - 1 && memcmp(buf, "hello", 5) == 0, c);

    /* Range contract. */
    CHECK_RC(dfkv_get_range(c, key, sizeof key - 1, 7, 4, buf, sizeof buf, &nread, &stored), DFKV_OK, c);
    CHECK(nread == 4 && stored == sizeof val - 1 && memcmp(buf, "dfkv", 4) == 0, c);
    CHECK_RC(dfkv_get_range(c, key, sizeof key - 1, 7, 0, buf, sizeof buf, &nread, &stored), DFKV_OK, c);
    CHECK(nread == 4, c);
    CHECK_RC(dfkv_get_range(c, key, sizeof key - 1, 7, 100, buf, sizeof buf, &nread, &stored), DFKV_OK, c);
    CHECK(nread == 4, c);
    CHECK_RC(dfkv_get_range(c, key, sizeof key - 1, sizeof val - 1, 0, buf, sizeof buf, &nread, &stored), DFKV_OK, c);
    CHECK(nread == 0, c);
    CHECK_RC(dfkv_get_range(c, key, sizeof key - 1, sizeof val, 0, buf, sizeof buf, &nread, &stored), DFKV_INVALID, c);

    CHECK_RC(dfkv_remove(c, key, sizeof key - 1), DFKV_OK, c);
    CHECK_RC(dfkv_exist(c, key, sizeof key - 1, &stored), DFKV_NOT_FOUND, c);
    CHECK_RC(dfkv_get(c, key, sizeof key - 1, buf, sizeof buf, &stored), DFKV_NOT_FOUND, c);
    CHECK(stored == 0, c);
    CHECK_RC(dfkv_remove(c, key, sizeof key - 1), DFKV_NOT_FOUND, c);
}

static void test_nul_keys(dfkv_client* c) {
    /* Three keys that a C-string API would confuse: "a", "a\0b", "a\0c". */
    const char k1[] = "a";
    const char k2[] = {'a', '\0', 'b'};
    const char k3[] = {'a', '\0', 'c'};
    char buf[8];
    uint64_t stored;
    /* Start clean even against a node that outlived an earlier run. */
    dfkv_remove(c, k1, 1);
    dfkv_remove(c, k2, sizeof k2);
    dfkv_remove(c, k3, sizeof k3);
    CHECK_RC(dfkv_put(c, k2, sizeof k2, "two", 3), DFKV_OK, c);
    CHECK_RC(dfkv_exist(c, k1, 1, &stored), DFKV_NOT_FOUND, c);
    CHECK_RC(dfkv_exist(c, k3, sizeof k3, &stored), DFKV_NOT_FOUND, c);
    CHECK_RC(dfkv_put(c, k3, sizeof k3, "three", 5), DFKV_OK, c);
    CHECK_RC(dfkv_get(c, k2, sizeof k2, buf, sizeof buf, &stored), DFKV_OK, c);
    CHECK(stored == 3 && memcmp(buf, "two", 3) == 0, c);
    CHECK_RC(dfkv_get(c, k3, sizeof k3, buf, sizeof buf, &stored), DFKV_OK, c);
    CHECK(stored == 5 && memcmp(buf, "three", 5) == 0, c);
    /* A value of NUL bytes is stored exactly. */
    const char zeros[4] = {0, 0, 0, 0};
    CHECK_RC(dfkv_put(c, k1, 1, zeros, sizeof zeros), DFKV_OK, c);
    memset(buf, 0x55, sizeof buf);
    CHECK_RC(dfkv_get(c, k1, 1, buf, sizeof buf, &stored), DFKV_OK, c);
    CHECK(stored == 4 && memcmp(buf, zeros, 4) == 0, c);
}

static void test_fail_closed(dfkv_client* c) {
    char buf[8];
    uint64_t stored = 99;
    char msg[256];
    CHECK_RC(dfkv_put(c, "k", 0, "v", 1), DFKV_INVALID, c);
    dfkv_last_error(c, msg, sizeof msg);
    CHECK(strstr(msg, "zero-length") != NULL, c);
    CHECK_RC(dfkv_put(c, NULL, 1, "v", 1), DFKV_INVALID, c);
    CHECK_RC(dfkv_put(c, NULL, 0, "v", 1), DFKV_INVALID, c);
    CHECK_RC(dfkv_put(c, "k", 1, "v", 0), DFKV_INVALID, c);
    dfkv_last_error(c, msg, sizeof msg);
    CHECK(strstr(msg, "zero-byte value") != NULL, c);
    CHECK_RC(dfkv_put(c, "k", 1, NULL, 0), DFKV_INVALID, c);
    CHECK_RC(dfkv_get(c, "", 0, buf, sizeof buf, &stored), DFKV_INVALID, c);
    CHECK(stored == 0, c);
    CHECK_RC(dfkv_get(c, "k", 1, buf, sizeof buf, NULL), DFKV_INVALID, c);
    CHECK_RC(dfkv_exist(c, "k", 0, NULL), DFKV_INVALID, c);
    CHECK_RC(dfkv_remove(c, NULL, 0), DFKV_INVALID, c);
    static char big_key[4097];
    memset(big_key, 'k', sizeof big_key);
    CHECK_RC(dfkv_exist(c, big_key, sizeof big_key, NULL), DFKV_INVALID, c);
    CHECK_RC(dfkv_exist(c, big_key, 4096, NULL), DFKV_NOT_FOUND, c);
    /* Truncated last error: returns the full length. */
    CHECK_RC(dfkv_put(c, "k", 0, "v", 1), DFKV_INVALID, c);
    size_t full = dfkv_last_error(c, msg, 4);
    CHECK(full > 4 && strlen(msg) == 3, c);
    CHECK(dfkv_last_error(c, NULL, 0) == full, c);
}

#define NB 8

static void test_batch(dfkv_client* c) {
    char keys[NB][16], vals[NB][32], out[NB][32];
    const void* kp[NB];
    const void* vp[NB];
    void* op[NB];
    uint64_t kl[NB], vl[NB], ol[NB], stored[NB];
    int32_t st[NB];
    for (int i = 0; i < NB; i++) {
        kl[i] = (uint64_t)snprintf(keys[i], sizeof keys[i], "batch-%d", i);
        vl[i] = (uint64_t)snprintf(vals[i], sizeof vals[i], "value of item %d", i);
        kp[i] = keys[i];
        vp[i] = vals[i];
        op[i] = out[i];
        ol[i] = sizeof out[i];
    }
    /* Put all but item 3, which is left a miss. */
    const void* kp7[NB - 1];
    const void* vp7[NB - 1];
    uint64_t kl7[NB - 1], vl7[NB - 1];
    for (int i = 0, j = 0; i < NB; i++) {
        if (i == 3) continue;
        kp7[j] = kp[i]; kl7[j] = kl[i]; vp7[j] = vp[i]; vl7[j] = vl[i]; j++;
    }
    CHECK_RC(dfkv_put_batch(c, NB - 1, kp7, kl7, vp7, vl7, st), DFKV_OK, c);
    for (int i = 0; i < NB - 1; i++) CHECK(st[i] == DFKV_OK, c);

    memset(out, 0, sizeof out);
    CHECK_RC(dfkv_get_batch(c, NB, kp, kl, op, ol, stored, st), DFKV_NOT_FOUND, c);
    for (int i = 0; i < NB; i++) {
        if (i == 3) {
            CHECK(st[i] == DFKV_NOT_FOUND && stored[i] == 0, c);
        } else {
            CHECK(st[i] == DFKV_OK && stored[i] == vl[i] && memcmp(out[i], vals[i], vl[i]) == 0, c);
        }
    }
    CHECK_RC(dfkv_exist_batch(c, NB, kp, kl, stored, st), DFKV_NOT_FOUND, c);
    for (int i = 0; i < NB; i++) CHECK(st[i] == (i == 3 ? DFKV_NOT_FOUND : DFKV_OK), c);
    CHECK_RC(dfkv_exist_batch(c, NB, kp, kl, NULL, st), DFKV_NOT_FOUND, c);

    /* Prefix: items 0..2 stored, 3 missing, 4.. stored => 3. */
    uint64_t hits = 99;
    CHECK_RC(dfkv_exist_prefix(c, NB, kp, kl, &hits), DFKV_OK, c);
    CHECK(hits == 3, c);
    CHECK_RC(dfkv_exist_prefix(c, 3, kp, kl, &hits), DFKV_OK, c);
    CHECK(hits == 3, c);
    CHECK_RC(dfkv_exist_prefix(c, 0, NULL, NULL, &hits), DFKV_OK, c);
    CHECK(hits == 0, c);

    /* One bad item in a batch fails alone; a zero-byte value is INVALID. */
    uint64_t vl_bad[NB];
    memcpy(vl_bad, vl, sizeof vl);
    vl_bad[5] = 0;
    CHECK_RC(dfkv_put_batch(c, NB, kp, kl, vp, vl_bad, st), DFKV_INVALID, c);
    for (int i = 0; i < NB; i++) CHECK(st[i] == (i == 5 ? DFKV_INVALID : DFKV_OK), c);
    uint64_t kl_bad[NB];
    memcpy(kl_bad, kl, sizeof kl);
    kl_bad[2] = 0;
    CHECK_RC(dfkv_exist_prefix(c, NB, kp, kl_bad, &hits), DFKV_INVALID, c);
    CHECK(hits == 2, c);
    CHECK_RC(dfkv_exist_batch(c, NB, kp, kl_bad, NULL, st), DFKV_INVALID, c);
    CHECK(st[2] == DFKV_INVALID && st[0] == DFKV_OK, c);

    /* Call-level argument errors. */
    CHECK_RC(dfkv_get_batch(c, NB, NULL, kl, op, ol, stored, st), DFKV_INVALID, c);
    for (int i = 0; i < NB; i++) CHECK(st[i] == DFKV_INVALID, c);
    CHECK_RC(dfkv_exist_batch(c, NB, kp, kl, NULL, NULL), DFKV_INVALID, c);

    CHECK_RC(dfkv_remove_batch(c, NB, kp, kl, st), DFKV_OK, c);
    for (int i = 0; i < NB; i++) CHECK(st[i] == DFKV_OK, c);
    CHECK_RC(dfkv_exist_prefix(c, NB, kp, kl, &hits), DFKV_OK, c);
    CHECK(hits == 0, c);
}

static void test_sg(dfkv_client* c) {
    const char key[] = "sg\0key";
    char a[3] = {'a', 'b', 'c'}, b[5] = {'d', 'e', 'f', 'g', 'h'}, d[1] = {'i'};
    const void* in[3] = {a, b, d};
    uint64_t in_lens[3] = {3, 5, 1};
    CHECK_RC(dfkv_put_sg(c, key, sizeof key - 1, 3, in, in_lens), DFKV_OK, c);
    char whole[16];
    uint64_t stored = 0;
    CHECK_RC(dfkv_get(c, key, sizeof key - 1, whole, sizeof whole, &stored), DFKV_OK, c);
    CHECK(stored == 9 && memcmp(whole, "abcdefghi", 9) == 0, c);

    /* Read back split differently. */
    char x[4], y[4], z[1];
    void* outb[3] = {x, y, z};
    uint64_t out_lens[3] = {4, 4, 1};
    CHECK_RC(dfkv_get_sg(c, key, sizeof key - 1, 3, outb, out_lens, &stored), DFKV_OK, c);
    CHECK(stored == 9 && memcmp(x, "abcd", 4) == 0 && memcmp(y, "efgh", 4) == 0 && z[0] == 'i', c);
    /* Buffers too small for the value. */
    out_lens[2] = 0;
    CHECK_RC(dfkv_get_sg(c, key, sizeof key - 1, 3, outb, out_lens, &stored), DFKV_INVALID, c);
    CHECK_RC(dfkv_get_sg(c, key, sizeof key - 1, 2, outb, out_lens, &stored), DFKV_TOO_LARGE, c);
    CHECK(stored == 9, c);
    /* Zero-byte SG pieces fail closed. */
    in_lens[1] = 0;
    CHECK_RC(dfkv_put_sg(c, key, sizeof key - 1, 3, in, in_lens), DFKV_INVALID, c);
    CHECK_RC(dfkv_put_sg(c, key, sizeof key - 1, 0, in, in_lens), DFKV_INVALID, c);
    /* Lengths whose sum wraps around 2^64 are refused as too large, never
     * read as a small total. */
    uint64_t wrap_lens[2] = {1, UINT64_MAX};
    CHECK_RC(dfkv_put_sg(c, key, sizeof key - 1, 2, in, wrap_lens), DFKV_TOO_LARGE, c);
}


static void test_batch_sg(dfkv_client* c) {
    /* Two items: "k0" from 2 pieces, "k1" from 1 piece; item 2 has a
     * zero-length piece and fails alone. */
    const void* keys[3] = {"bsg-k0", "bsg-k1", "bsg-k2"};
    uint64_t key_lens[3] = {6, 6, 6};
    uint64_t counts[3] = {2, 1, 1};
    const void* in[4] = {"hello ", "world", "solo", "x"};
    uint64_t in_lens[4] = {6, 5, 4, 0};
    int32_t st[3];
    dfkv_remove_batch(c, 3, keys, key_lens, st);
    CHECK_RC(dfkv_put_batch_sg(c, 3, keys, key_lens, counts, in, in_lens, st), DFKV_INVALID, c);
    CHECK(st[0] == DFKV_OK && st[1] == DFKV_OK && st[2] == DFKV_INVALID, c);

    char a[4], b[7], d[8], e[1];
    void* out[4] = {a, b, d, e};
    uint64_t out_lens[4] = {4, 7, 8, 1};
    uint64_t stored[3];
    CHECK_RC(dfkv_get_batch_sg(c, 3, keys, key_lens, counts, out, out_lens, stored, st), DFKV_NOT_FOUND, c);
    CHECK(st[0] == DFKV_OK && stored[0] == 11 && memcmp(a, "hell", 4) == 0 && memcmp(b, "o world", 7) == 0, c);
    CHECK(st[1] == DFKV_OK && stored[1] == 4 && memcmp(d, "solo", 4) == 0, c);
    CHECK(st[2] == DFKV_NOT_FOUND && stored[2] == 0, c);
    CHECK_RC(dfkv_get_batch_sg(c, 3, keys, key_lens, NULL, out, out_lens, stored, st), DFKV_INVALID, c);
    /* counts whose sum wraps around 2^64 fail the call as INVALID. */
    uint64_t wrap_counts[3] = {3, UINT64_MAX - 1, 1};
    CHECK_RC(dfkv_put_batch_sg(c, 3, keys, key_lens, wrap_counts, in, in_lens, st), DFKV_INVALID, c);
    CHECK(st[0] == DFKV_INVALID && st[1] == DFKV_INVALID && st[2] == DFKV_INVALID, c);
    CHECK_RC(dfkv_get_batch_sg(c, 3, keys, key_lens, wrap_counts, out, out_lens, stored, st), DFKV_INVALID, c);
    /* Without a statuses array the stored lengths are still preset, not
     * left at the caller's stale values. */
    stored[0] = stored[1] = stored[2] = 99;
    CHECK_RC(dfkv_get_batch_sg(c, 3, keys, key_lens, counts, out, out_lens, stored, NULL), DFKV_INVALID, c);
    CHECK(stored[0] == 0 && stored[1] == 0 && stored[2] == 0, c);
    stored[0] = stored[1] = 99;
    const void* k2[2] = {"bsg-k0", "bsg-k1"};
    void* o2[2] = {b, d};
    uint64_t ol2[2] = {7, 8};
    CHECK_RC(dfkv_get_batch(c, 2, k2, key_lens, o2, ol2, stored, NULL), DFKV_INVALID, c);
    CHECK(stored[0] == 0 && stored[1] == 0, c);

    /* Ranged: "lo w" from the middle of "hello world" into two buffers;
     * a range running past the end of "solo" fills a prefix; offset ==
     * stored length reads nothing; past it fails that item alone. */
    const void* rk[4] = {"bsg-k0", "bsg-k1", "bsg-k1", "bsg-k1"};
    uint64_t rkl[4] = {6, 6, 6, 6};
    uint64_t roffs[4] = {3, 2, 4, 5};
    uint64_t rcounts[4] = {2, 1, 1, 1};
    char r0[2], r1[2], r2[8], r3[1] = {'#'}, r4[1];
    memset(r2, '#', sizeof r2);
    void* rout[5] = {r0, r1, r2, r3, r4};
    uint64_t rlens[5] = {2, 2, 8, 1, 1};
    uint64_t rstored[4];
    int32_t rst[4];
    CHECK_RC(dfkv_get_batch_range_sg(c, 4, rk, rkl, roffs, rcounts, rout, rlens, rstored, rst), DFKV_INVALID, c);
    CHECK(rst[0] == DFKV_OK && rstored[0] == 11 && memcmp(r0, "lo", 2) == 0 && memcmp(r1, " w", 2) == 0, c);
    CHECK(rst[1] == DFKV_OK && rstored[1] == 4 && memcmp(r2, "lo######", 8) == 0, c);
    CHECK(rst[2] == DFKV_OK && rstored[2] == 4 && r3[0] == '#', c);
    CHECK(rst[3] == DFKV_INVALID && rstored[3] == 4, c);
    /* A NULL offsets array fails the call. */
    CHECK_RC(dfkv_get_batch_range_sg(c, 4, rk, rkl, NULL, rcounts, rout, rlens, rstored, rst), DFKV_INVALID, c);
    CHECK(rst[0] == DFKV_INVALID && rst[3] == DFKV_INVALID, c);
}

/* Renders the object key of a chain hash: prefix then 64 lower-case hex
 * digits, NUL-terminated; returns its length. */
static size_t chain_key(char* out, const char* prefix, const uint8_t* hash) {
    size_t n = strlen(prefix);
    memcpy(out, prefix, n);
    for (int i = 0; i < DFKV_CHAIN_HASH_BYTES; i++) {
        snprintf(out + n + 2 * (size_t)i, 3, "%02x", hash[i]);
    }
    return n + 2 * DFKV_CHAIN_HASH_BYTES;
}

static void hex32(char* out, const uint8_t* hash) {
    for (int i = 0; i < DFKV_CHAIN_HASH_BYTES; i++) snprintf(out + 2 * i, 3, "%02x", hash[i]);
}

static void test_chain_keys(dfkv_client* c) {
    /* fingerprint 0x0123456789abcdef, tokens 1..5, blocks of 2: two full
     * blocks and a one-token tail. The expected values are BLAKE3 over
     * the bytes spelled out in wire/chain.go, from the reference b3sum. */
    const uint32_t toks[5] = {1, 2, 3, 4, 5};
    const uint64_t fp = 0x0123456789abcdefULL;
    uint8_t hashes[4 * DFKV_CHAIN_HASH_BYTES], name[DFKV_CHAIN_HASH_BYTES], digest[DFKV_CHAIN_HASH_BYTES];
    uint64_t nb = 99, tt = 99;
    char hx[2 * DFKV_CHAIN_HASH_BYTES + 1];
    CHECK_RC(dfkv_chain_keys(fp, toks, 5, 2, hashes, 4, &nb, name, digest, &tt), DFKV_OK, NULL);
    CHECK(nb == 2 && tt == 1, NULL);
    hex32(hx, hashes);
    CHECK(strcmp(hx, "4c401db66ba43808ab8c39000bb6ed44bdc192f7afe43851eb114547b8fa37c2") == 0, NULL);
    hex32(hx, hashes + DFKV_CHAIN_HASH_BYTES);
    CHECK(strcmp(hx, "7b54aae8fb35cd93c2a117df40dda67eac8c763e7cb5a6c90e3ac96cdb928b7b") == 0, NULL);
    hex32(hx, name);
    CHECK(strcmp(hx, "a470ef02343c42a21f1bf9bd6d5d0a40e47b2f3eaba6264d1342dfe4cd8acf89") == 0, NULL);
    hex32(hx, digest);
    CHECK(strcmp(hx, "3cdee5030b2c1d0c66ef6fd378f709657896023b29fdfd84ca6a1682265668fc") == 0, NULL);

    /* Too little room: TOO_LARGE with the count needed, and asking with
     * no buffer at all is how a caller sizes one. */
    CHECK_RC(dfkv_chain_keys(fp, toks, 5, 2, hashes, 1, &nb, name, digest, &tt), DFKV_TOO_LARGE, NULL);
    CHECK(nb == 2 && tt == 0, NULL);
    char msg[512];
    dfkv_last_error(NULL, msg, sizeof msg);
    CHECK(strstr(msg, "dfkv_chain_keys") != NULL && strstr(msg, "room for 2") != NULL, NULL);
    CHECK_RC(dfkv_chain_keys(fp, toks, 5, 1, NULL, 0, &nb, name, digest, &tt), DFKV_TOO_LARGE, NULL);
    CHECK(nb == 5, NULL);
    /* Exact multiple: no tail, zeroed tail outputs. */
    memset(name, 0xaa, sizeof name);
    CHECK_RC(dfkv_chain_keys(fp, toks, 4, 2, hashes, 2, &nb, name, digest, &tt), DFKV_OK, NULL);
    CHECK(nb == 2 && tt == 0 && name[0] == 0 && name[31] == 0, NULL);
    /* Nothing, or only a tail: no hashes needed. */
    CHECK_RC(dfkv_chain_keys(fp, NULL, 0, 16, NULL, 0, &nb, name, digest, &tt), DFKV_OK, NULL);
    CHECK(nb == 0 && tt == 0, NULL);
    CHECK_RC(dfkv_chain_keys(fp, toks, 5, 16, NULL, 0, &nb, name, digest, &tt), DFKV_OK, NULL);
    CHECK(nb == 0 && tt == 5, NULL);
    /* Argument errors: INVALID, outputs preset. */
    CHECK_RC(dfkv_chain_keys(fp, toks, 5, 0, hashes, 4, &nb, name, digest, &tt), DFKV_INVALID, NULL);
    dfkv_last_error(NULL, msg, sizeof msg);
    CHECK(strstr(msg, "block_tokens is 0") != NULL, NULL);
    CHECK_RC(dfkv_chain_keys(fp, NULL, 5, 2, hashes, 4, &nb, name, digest, &tt), DFKV_INVALID, NULL);
    CHECK(nb == 0 && tt == 0, NULL);
    CHECK_RC(dfkv_chain_keys(fp, toks, 5, 2, NULL, 4, &nb, name, digest, &tt), DFKV_INVALID, NULL);
    CHECK_RC(dfkv_chain_keys(fp, toks, 5, 2, hashes, 4, NULL, name, digest, &tt), DFKV_INVALID, NULL);
    CHECK_RC(dfkv_chain_keys(fp, toks, 5, 2, hashes, 4, &nb, NULL, digest, &tt), DFKV_INVALID, NULL);
    CHECK_RC(dfkv_chain_keys(fp, toks, 5, 2, hashes, 4, &nb, name, NULL, &tt), DFKV_INVALID, NULL);
    CHECK_RC(dfkv_chain_keys(fp, toks, 5, 2, hashes, 4, &nb, name, digest, NULL), DFKV_INVALID, NULL);
    CHECK_RC(dfkv_chain_keys(fp, toks, (uint64_t)1 << 33, 1 << 20, NULL, 0, &nb, name, digest, &tt), DFKV_INVALID, NULL);

    /* End to end: the rendered keys go through dfkv_put and
     * dfkv_exist_prefix like any other; storing block 0 of the two makes
     * a prefix of 1. */
    CHECK_RC(dfkv_chain_keys(fp, toks, 5, 2, hashes, 4, &nb, name, digest, &tt), DFKV_OK, NULL);
    char keys[3][128];
    const void* kp[3] = {keys[0], keys[1], keys[2]};
    uint64_t kl[3];
    kl[0] = chain_key(keys[0], DFKV_CHAIN_BLOCK_KEY_PREFIX, hashes);
    kl[1] = chain_key(keys[1], DFKV_CHAIN_BLOCK_KEY_PREFIX, hashes + DFKV_CHAIN_HASH_BYTES);
    kl[2] = chain_key(keys[2], DFKV_CHAIN_TAIL_KEY_PREFIX, name);
    CHECK(kl[0] == 81 && strncmp(keys[0], "dfkv/chain/v1/b3=4c401db6", 25) == 0, c);
    CHECK(kl[2] == 86 && strncmp(keys[2], "dfkv/chain/v1/tail/b3=a470ef02", 30) == 0, c);
    int32_t st[3];
    dfkv_remove_batch(c, 3, kp, kl, st);
    uint64_t hits = 99;
    CHECK_RC(dfkv_exist_prefix(c, 3, kp, kl, &hits), DFKV_OK, c);
    CHECK(hits == 0, c);
    CHECK_RC(dfkv_put(c, keys[0], kl[0], "kv0", 3), DFKV_OK, c);
    CHECK_RC(dfkv_exist_prefix(c, 3, kp, kl, &hits), DFKV_OK, c);
    CHECK(hits == 1, c);
    CHECK_RC(dfkv_remove(c, keys[0], kl[0]), DFKV_OK, c);
}

static void test_stats_and_close(const char* members) {
    dfkv_client* c = open_client(members);
    uint64_t len = 0;
    CHECK_RC(dfkv_stats(c, NULL, 0, &len), DFKV_TOO_LARGE, c);
    CHECK(len > 2, c);
    /* Counters may grow between the calls: leave headroom. */
    uint64_t cap = len + 4096;
    char* buf = malloc(cap);
    CHECK_RC(dfkv_stats(c, buf, cap, &len), DFKV_OK, c);
    CHECK(buf[0] == '{' && buf[len - 1] == '}' && strlen(buf) == len, c);
    free(buf);
    CHECK_RC(dfkv_close(c), DFKV_OK, NULL);
    /* A closed handle fails closed, never crashes. */
    uint64_t stored;
    CHECK_RC(dfkv_exist(c, "k", 1, &stored), DFKV_INVALID, NULL);
    CHECK_RC(dfkv_close(c), DFKV_INVALID, NULL);
    CHECK_RC(dfkv_close(NULL), DFKV_INVALID, NULL);
    int32_t st2[2] = {99, 99};
    const void* k2[2] = {"a", "b"};
    uint64_t kl2[2] = {1, 1};
    CHECK_RC(dfkv_exist_batch(c, 2, k2, kl2, NULL, st2), DFKV_INVALID, NULL);
    CHECK(st2[0] == DFKV_INVALID && st2[1] == DFKV_INVALID, NULL);
    CHECK_RC(dfkv_put(NULL, "k", 1, "v", 1), DFKV_INVALID, NULL);
    CHECK(strcmp(dfkv_status_name(DFKV_NOT_FOUND), "NOT_FOUND") == 0, NULL);
    CHECK(strcmp(dfkv_status_name(DFKV_INTERNAL), "INTERNAL") == 0, NULL);
    CHECK(strcmp(dfkv_status_name(99), "UNKNOWN") == 0, NULL);
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s host:port[,host:port...]\n", argv[0]);
        return 2;
    }
    test_open_options(argv[1]);
    test_token(argv[1]);
    test_tls(argv[1]);
    dfkv_client* c = open_client(argv[1]);
    test_scalar(c);
    test_nul_keys(c);
    test_fail_closed(c);
    test_batch(c);
    test_sg(c);
    test_batch_sg(c);
    test_chain_keys(c);
    CHECK_RC(dfkv_close(c), DFKV_OK, NULL);
    test_stats_and_close(argv[1]);
    if (failures) {
        fprintf(stderr, "dfkv_test: %d check(s) failed\n", failures);
        return 1;
    }
    printf("dfkv_test: all checks passed\n");
    return 0;
}
