/* The C ABI from C, built with -fsanitize=address,undefined by tests/c_abi.rs.
 * argv[1]: path to examples/risk.toml (default rules + native XGBoost, synthetic schema).
 * Every check prints what failed and exits non-zero. */
#include "risk.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond, ...)                                                        \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);           \
      fprintf(stderr, __VA_ARGS__);                                             \
      fprintf(stderr, " (last error: %s)\n", risk_last_error());                \
      failures++;                                                               \
    }                                                                           \
  } while (0)
#define EXPECT(call, code) CHECK((call) == (code), "expected %s", #code)

static risk_txn base_txn(uint64_t id, risk_feature *f, size_t n) {
  risk_txn t;
  memset(&t, 0, sizeof t);
  t.id = id;
  t.entity = 1000 + id % 97;
  t.timestamp_ms = 1767571200000LL + (int64_t)id * 1000;
  t.amount = 42.5;
  t.currency = "USD";
  t.mcc = 5411;
  t.country = "US";
  t.channel = "pos";
  t.device = 7;
  t.features = f;
  t.n_features = n;
  return t;
}

static risk_engine *engine;

static void *worker(void *arg) {
  uint64_t base = (uint64_t)(uintptr_t)arg;
  risk_feature f[2] = {{"txn_count_1h", 2.0, NULL}, {"hour", 14.0, NULL}};
  for (uint64_t i = 0; i < 5000; i++) {
    risk_txn t = base_txn(base + i, f, 2);
    risk_decision d;
    if (risk_engine_decide(engine, &t, &d) != RISK_OK || d.txn != base + i ||
        d.action > RISK_ACTION_DECLINE) {
      fprintf(stderr, "FAIL worker %llu item %llu: %s\n", (unsigned long long)base,
              (unsigned long long)i, risk_last_error());
      return (void *)1;
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_ffi risk.toml\n");
    return 2;
  }
  CHECK(risk_version() != NULL && strlen(risk_version()) > 0, "version");

  /* ----- construction ----- */
  risk_engine *e = NULL;
  EXPECT(risk_engine_new_from_path(NULL, &e), RISK_ERR_NULL);
  EXPECT(risk_engine_new_from_path(argv[1], NULL), RISK_ERR_NULL);
  EXPECT(risk_engine_new_from_path("/nonexistent/risk.toml", &e), RISK_ERR_CONFIG);
  CHECK(strstr(risk_last_error(), "/nonexistent/risk.toml") != NULL, "error names the file");
  CHECK(e == NULL, "no output on failure");
  const char bad_utf8[] = {'[', (char)0xff, ']', 0};
  EXPECT(risk_engine_new_from_path(bad_utf8, &e), RISK_ERR_UTF8);
  const char *toml =
      "[schema]\nfields = [{ name = \"amount\", kind = \"numeric\", required = true }]\n"
      "[rules.scorer]\nkind = \"constant\"\nprobability = 0.1\n"
      "[gray]\nband = [0.7, 0.3]\n";
  EXPECT(risk_engine_new_from_toml((const uint8_t *)toml, strlen(toml), NULL, &e), RISK_ERR_CONFIG);
  CHECK(strstr(risk_last_error(), "gray.band") != NULL, "error names the key");
  EXPECT(risk_engine_new_from_toml((const uint8_t *)bad_utf8, 3, NULL, &e), RISK_ERR_UTF8);
  EXPECT(risk_engine_new_from_toml(NULL, 1, NULL, &e), RISK_ERR_NULL);
  EXPECT(risk_engine_new_from_toml(NULL, 0, NULL, &e), RISK_ERR_CONFIG); /* empty text: no schema */
  /* the same text with a valid band builds an engine */
  const char *good =
      "[schema]\nfields = [{ name = \"amount\", kind = \"numeric\", required = true }]\n"
      "[rules.scorer]\nkind = \"constant\"\nprobability = 0.1\n";
  EXPECT(risk_engine_new_from_toml((const uint8_t *)good, strlen(good), NULL, &e), RISK_OK);
  EXPECT(risk_engine_reload_rules(e), RISK_ERR_RELOAD); /* no rule file */
  /* no deep tier: a subscription is closed at once, never a spin on EMPTY */
  risk_subscription *closed = NULL;
  EXPECT(risk_engine_subscribe(e, &closed), RISK_OK);
  risk_verdict cv;
  EXPECT(risk_subscription_poll(closed, 1000, &cv), RISK_ERR_CLOSED);
  risk_subscription_free(closed);
  risk_engine_free(e);
  EXPECT(risk_engine_new_from_toml((const uint8_t *)toml, (size_t)1 << 40, NULL, &e), RISK_ERR_INVALID);

  EXPECT(risk_engine_new_from_path(argv[1], &engine), RISK_OK);
  CHECK(engine != NULL, "engine");
  if (!engine) return 1;

  /* ----- decide ----- */
  risk_feature f[3] = {{"txn_count_1h", 3.0, NULL}, {"hour", 23.0, NULL}, {"device_new", 1.0, NULL}};
  risk_txn t = base_txn(1, f, 3);
  risk_decision d;
  memset(&d, 0xAB, sizeof d);
  EXPECT(risk_engine_decide(engine, &t, &d), RISK_OK);
  CHECK(d.txn == 1 && d.action <= RISK_ACTION_DECLINE && d.tier <= RISK_TIER_STATIC, "fields");
  CHECK(d.n_reasons <= RISK_MAX_REASONS, "reasons bounded");
  CHECK(d.score >= 0.0f && d.score <= 1.0f, "score %f", d.score);
  CHECK(strcmp(risk_fallback_name(d.fallback), "none") == 0 || d.fallback != 0, "fallback name");
  CHECK(strcmp(risk_fallback_name(200), "unknown") == 0, "unknown fallback");
  for (uint32_t i = 0; i < d.n_reasons; i++) {
    char name[128];
    size_t len = 0;
    EXPECT(risk_reason_name(d.reasons[i].code, name, sizeof name, &len), RISK_OK);
    CHECK(len > 0 && strlen(name) == len, "reason name");
    char tiny[2];
    EXPECT(risk_reason_name(d.reasons[i].code, tiny, sizeof tiny, &len), RISK_ERR_BUFFER_TOO_SMALL);
  }
  size_t len = 0;
  EXPECT(risk_reason_name(0xFFFFFFF0u, NULL, 0, &len), RISK_ERR_INVALID);

  /* ----- explain on request: the model's reasons, whatever the decision carried ----- */
  {
    risk_reason why[RISK_MAX_REASONS];
    uint32_t nwhy = 99;
    EXPECT(risk_engine_explain(engine, &t, why, &nwhy), RISK_OK);
    CHECK(nwhy > 0 && nwhy <= RISK_MAX_REASONS, "explained: %u", nwhy);
    uint32_t k = 0; /* the decision's model reasons, in order, equal the first ones */
    for (uint32_t i = 0; i < d.n_reasons; i++) {
      char name[128];
      size_t nl = 0;
      EXPECT(risk_reason_name(d.reasons[i].code, name, sizeof name, &nl), RISK_OK);
      if (strncmp(name, "xgb:", 4) != 0) continue;
      CHECK(k < nwhy && why[k].code == d.reasons[i].code && why[k].weight == d.reasons[i].weight,
            "model reason %u of the decision", k);
      k++;
    }
    for (uint32_t i = 0; i < nwhy; i++) {
      char name[128];
      size_t nl = 0;
      EXPECT(risk_reason_name(why[i].code, name, sizeof name, &nl), RISK_OK);
      CHECK(strncmp(name, "xgb:", 4) == 0, "a model reason: %s", name);
    }
    risk_txn bad = t;
    bad.amount = NAN;
    EXPECT(risk_engine_explain(engine, &bad, why, &nwhy), RISK_ERR_TRANSACTION);
    EXPECT(risk_engine_explain(engine, NULL, why, &nwhy), RISK_ERR_NULL);
    EXPECT(risk_engine_explain(engine, &t, NULL, &nwhy), RISK_ERR_NULL);
    EXPECT(risk_engine_explain(engine, &t, why, NULL), RISK_ERR_NULL);
  }

  /* bad transactions */
  risk_decision keep = d;
  t = base_txn(2, f, 3);
  t.amount = NAN;
  EXPECT(risk_engine_decide(engine, &t, &d), RISK_ERR_TRANSACTION);
  CHECK(strstr(risk_last_error(), "amount") != NULL, "names amount: %s", risk_last_error());
  CHECK(memcmp(&keep, &d, sizeof d) == 0, "output untouched on failure");
  t = base_txn(2, f, 3);
  t.currency = NULL;
  EXPECT(risk_engine_decide(engine, &t, &d), RISK_ERR_NULL);
  t = base_txn(2, f, 3);
  t.currency = bad_utf8;
  EXPECT(risk_engine_decide(engine, &t, &d), RISK_ERR_UTF8);
  t = base_txn(2, f, 3);
  t.currency = "ZZZZ";
  EXPECT(risk_engine_decide(engine, &t, &d), RISK_ERR_TRANSACTION);
  t = base_txn(2, f, 3);
  t.channel = "carrier-pigeon";
  EXPECT(risk_engine_decide(engine, &t, &d), RISK_ERR_TRANSACTION);
  risk_feature unknown[1] = {{"no_such_field", 1.0, NULL}};
  t = base_txn(2, unknown, 1);
  EXPECT(risk_engine_decide(engine, &t, &d), RISK_ERR_TRANSACTION);
  CHECK(strstr(risk_last_error(), "no_such_field") != NULL, "names the field");
  risk_feature nan_feature[1] = {{"txn_count_1h", NAN, NULL}};
  t = base_txn(2, nan_feature, 1);
  EXPECT(risk_engine_decide(engine, &t, &d), RISK_OK); /* NaN = missing, allowed */
  risk_feature huge[1] = {{"txn_count_1h", 1e300, NULL}};
  t = base_txn(2, huge, 1);
  EXPECT(risk_engine_decide(engine, &t, &d), RISK_ERR_TRANSACTION);
  CHECK(strstr(risk_last_error(), "f32 range") != NULL, "range message: %s", risk_last_error());
  t = base_txn(2, NULL, 5);
  EXPECT(risk_engine_decide(engine, &t, &d), RISK_ERR_NULL);
  t = base_txn(2, f, 1000000);
  EXPECT(risk_engine_decide(engine, &t, &d), RISK_ERR_INVALID);
  risk_feature null_name[1] = {{NULL, 1.0, NULL}};
  t = base_txn(2, null_name, 1);
  EXPECT(risk_engine_decide(engine, &t, &d), RISK_ERR_NULL);
  EXPECT(risk_engine_decide(engine, NULL, &d), RISK_ERR_NULL);
  EXPECT(risk_engine_decide(engine, &t, NULL), RISK_ERR_NULL);
  EXPECT(risk_engine_decide(NULL, &t, &d), RISK_ERR_NULL);

  /* JSON */
  const char *j = "{\"id\": 9, \"entity\": 5, \"timestamp_ms\": 1767571200000, \"amount\": 12.5, "
                  "\"currency\": \"GBP\", \"country\": \"GB\", \"channel\": \"ecom\", "
                  "\"features\": {\"txn_count_1h\": 1, \"hour\": null}}";
  EXPECT(risk_engine_decide_json(engine, (const uint8_t *)j, strlen(j), &d), RISK_OK);
  CHECK(d.txn == 9 && d.entity == 5, "json ids");
  const char *bad_json[] = {"{", "[]", "{\"amount\": 1}", "{\"amount\": 1, \"currency\": \"USD\", \"bogus\": 1}",
                            "{\"amount\": \"x\", \"currency\": \"USD\"}",
                            "{\"amount\": 1, \"currency\": \"USD\", \"features\": {\"hour\": [1]}}"};
  for (size_t i = 0; i < sizeof bad_json / sizeof *bad_json; i++) {
    risk_result r = risk_engine_decide_json(engine, (const uint8_t *)bad_json[i], strlen(bad_json[i]), &d);
    CHECK(r == RISK_ERR_JSON, "bad json %zu gave %u", i, r);
  }
  EXPECT(risk_engine_decide_json(engine, (const uint8_t *)bad_utf8, 3, &d), RISK_ERR_UTF8);
  EXPECT(risk_engine_decide_json(engine, (const uint8_t *)j, (size_t)1 << 30, &d), RISK_ERR_INVALID);

  /* batch: one bad item among good ones */
  risk_txn batch[4];
  for (int i = 0; i < 4; i++) batch[i] = base_txn(100 + i, f, 3);
  batch[2].amount = -1.0;
  risk_decision out[4];
  risk_result codes[4];
  EXPECT(risk_engine_decide_batch(engine, batch, 4, out, codes), RISK_OK);
  CHECK(codes[0] == RISK_OK && codes[1] == RISK_OK && codes[2] == RISK_ERR_TRANSACTION && codes[3] == RISK_OK,
        "per-item codes %u %u %u %u", codes[0], codes[1], codes[2], codes[3]);
  CHECK(out[3].txn == 103, "batch order");
  EXPECT(risk_engine_decide_batch(engine, batch, 4, NULL, codes), RISK_ERR_NULL);
  EXPECT(risk_engine_decide_batch(engine, batch, 0, NULL, NULL), RISK_OK);
  EXPECT(risk_engine_decide_batch(NULL, batch, 0, NULL, NULL), RISK_ERR_NULL);
  EXPECT(risk_engine_decide_batch(engine, batch, 1u << 20, out, codes), RISK_ERR_INVALID);

  /* metrics */
  EXPECT(risk_engine_metrics_json(engine, NULL, 0, &len), RISK_ERR_BUFFER_TOO_SMALL);
  CHECK(len > 10, "metrics size");
  char *buf = malloc(len + 1);
  EXPECT(risk_engine_metrics_json(engine, buf, len + 1, &len), RISK_OK);
  CHECK(strstr(buf, "\"decisions\"") != NULL && strlen(buf) == len, "metrics json");
  free(buf);
  EXPECT(risk_engine_metrics_json(engine, NULL, 0, NULL), RISK_ERR_NULL);

  /* rules reload (the same file: compiles) */
  EXPECT(risk_engine_reload_rules(engine), RISK_OK);

  /* subscriptions */
  risk_subscription *s = NULL;
  EXPECT(risk_engine_subscribe(engine, &s), RISK_OK);
  risk_verdict v;
  /* examples/risk.toml has no deep tier: closed, at once */
  EXPECT(risk_subscription_poll(s, 0, &v), RISK_ERR_CLOSED);
  EXPECT(risk_subscription_poll(s, 0, NULL), RISK_ERR_NULL);
  /* a subscription is not an engine, and the other way round */
  EXPECT(risk_engine_decide((const risk_engine *)s, &t, &d), RISK_ERR_HANDLE);
  EXPECT(risk_subscription_poll((const risk_subscription *)engine, 0, &v), RISK_ERR_HANDLE);
  risk_subscription_free(s);
  risk_subscription_free(s); /* documented: ignored */
  EXPECT(risk_subscription_poll(s, 0, &v), RISK_ERR_HANDLE);
  risk_subscription_free(NULL);

  /* many threads on one handle */
  pthread_t th[4];
  for (uintptr_t i = 0; i < 4; i++) pthread_create(&th[i], NULL, worker, (void *)(1000000 * (i + 1)));
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(th[i], &r);
    CHECK(r == NULL, "worker %d", i);
  }

  /* shutdown, then free twice */
  uint64_t drained = 99, abandoned = 99;
  EXPECT(risk_engine_shutdown(engine, 0, &drained, &abandoned), RISK_OK);
  t = base_txn(3, f, 3);
  EXPECT(risk_engine_decide(engine, &t, &d), RISK_ERR_SHUT_DOWN);
  risk_engine_free(engine);
  risk_engine_free(engine); /* documented: ignored */
  EXPECT(risk_engine_decide(engine, &t, &d), RISK_ERR_HANDLE);
  risk_engine_free(NULL);

  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("c abi: all checks passed\n");
  return 0;
}
