/* Multi-threaded stress of the C ABI, meant to run under valgrind (memcheck, helgrind/drd):
 * see run_valgrind.sh next to it.
 *
 *   stress WORKDIR [DECIDERS [ROUNDS [ORDER]]]
 *
 * WORKDIR: a writable directory for the rule file (stress.rules) and its temporary copy.
 * DECIDERS (default 4): threads calling risk_engine_decide, _decide_json and _decide_batch
 *   with good and bad inputs (NULL pointers, invalid UTF-8, unknown keys and features,
 *   negative amounts and timestamps, NaN, oversized lengths).
 * ROUNDS (default 200): rounds each decider completes before the main thread frees the
 *   handles (one round = one decide, one decide_json and one batch of 6).
 * ORDER: "sub-first" (default: risk_subscription_free, then risk_engine_free) or
 *   "engine-first".
 *
 * Beside the deciders: 2 pollers share one subscription (risk_subscription_poll, timeouts
 * 0-3 ms), 1 reloader rewrites the rule file (write a temporary file, rename() it over the
 * rule file) alternately with a valid and a broken version and calls
 * risk_engine_reload_rules, 1 thread reads risk_engine_metrics_json. The engine's fast tier
 * is a constant 0.5, inside the gray band, so every non-hard decision is escalated to the
 * deep tier (a constant) and verdicts reach the pollers.
 *
 * Once every decider has done ROUNDS rounds (and the reloader and pollers have done some
 * work), the main thread frees the subscription and the engine while all threads still
 * call. Every call must return its expected code; from the moment the main thread starts
 * freeing, calls on a freed (or freeing) handle may instead return RISK_ERR_HANDLE,
 * RISK_ERR_SHUT_DOWN or (polls) RISK_ERR_CLOSED. A thread stops after it has seen
 * RISK_ERR_HANDLE STOP_AFTER times. The main thread joins them, prints the count of each
 * code per function and exits 1 on any unexpected code (RISK_ERR_PANIC is never expected). */
#include "risk.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STOP_AFTER 3
#define N_CODES 16 /* 0..14, then 15 = "a code this header does not know" */

static const char *code_name(unsigned c) {
  static const char *names[] = {"OK",         "ERR_NULL",  "ERR_UTF8",  "ERR_INVALID",
                                "ERR_CONFIG", "ERR_TRANSACTION", "ERR_SHUT_DOWN", "ERR_PANIC",
                                "ERR_BUFFER_TOO_SMALL", "ERR_JSON", "ERR_HANDLE", "ERR_EMPTY",
                                "ERR_RELOAD", "ERR_CLOSED", "ERR_AUDIT", "(unknown)"};
  return names[c < N_CODES ? c : N_CODES - 1];
}

enum fn {
  F_DECIDE,
  F_DECIDE_JSON,
  F_BATCH,
  F_BATCH_ITEM,
  F_POLL,
  F_RELOAD,
  F_METRICS,
  N_FNS
};
static const char *fn_name[N_FNS] = {"risk_engine_decide",       "risk_engine_decide_json",
                                     "risk_engine_decide_batch", "  (batch items)",
                                     "risk_subscription_poll",   "risk_engine_reload_rules",
                                     "risk_engine_metrics_json"};

static atomic_ulong counts[N_FNS][N_CODES];
static atomic_ulong unexpected;
static atomic_int engine_freeing, sub_freeing; /* set by main just before each free */
static atomic_int deciders_done, reloads_done, verdicts_seen, metrics_done;

static risk_engine *engine;
static risk_subscription *sub;
static const char *workdir;

#define BIT(c) (1u << (c))
/* Codes any call on an engine handle may get once the engine is being freed. */
#define ENGINE_GONE (BIT(RISK_ERR_HANDLE) | BIT(RISK_ERR_SHUT_DOWN))
#define SUB_GONE (BIT(RISK_ERR_HANDLE) | BIT(RISK_ERR_CLOSED))

/* Counts `r` for `f`; true when it is allowed: in `ok`, or in `late` once `*freeing`. */
static int record(enum fn f, risk_result r, unsigned ok, unsigned late, atomic_int *freeing,
                  const char *what) {
  unsigned c = r < N_CODES - 1 ? r : N_CODES - 1;
  atomic_fetch_add_explicit(&counts[f][c], 1, memory_order_relaxed);
  int good = r < 32 && ((ok & BIT(r)) || ((late & BIT(r)) && freeing && atomic_load(freeing)));
  if (r == RISK_ERR_PANIC) good = 0;
  if (r != RISK_OK) {
    const char *msg = risk_last_error(); /* thread-local: exercised on every failure */
    if (msg == NULL) {
      fprintf(stderr, "UNEXPECTED %s (%s): risk_last_error() is NULL\n", fn_name[f], what);
      good = 0;
    } else if (!good) {
      fprintf(stderr, "UNEXPECTED %s (%s): %u %s: %s\n", fn_name[f], what, r, code_name(c), msg);
    }
  }
  if (!good) atomic_fetch_add(&unexpected, 1);
  return good;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}


/* Every input and output of a call lives in its own heap block, freed as soon as the call
 * returns: memcheck then reports any read or write of caller memory after a call returned
 * (a deep-tier thread keeping a pointer into a transaction, a late write to `out`) as an
 * invalid access. That is also what lets valgrind.supp suppress helgrind reports on the
 * library's own, Rust-owned memory without hiding races on the caller's. */
static char *dup_str(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  memcpy(p, s, n);
  return p;
}

/* A deep copy of `t` (strings, feature array and names) in fresh heap blocks. */
static risk_txn *dup_txns(const risk_txn *t, size_t n) {
  risk_txn *c = malloc(n * sizeof *c);
  for (size_t i = 0; i < n; i++) {
    c[i] = t[i];
    c[i].currency = dup_str(t[i].currency);
    c[i].country = dup_str(t[i].country);
    c[i].channel = dup_str(t[i].channel);
    if (t[i].features && t[i].n_features <= 16) {
      risk_feature *f = malloc(t[i].n_features * sizeof *f + 1);
      for (size_t k = 0; k < t[i].n_features; k++) {
        f[k] = t[i].features[k];
        f[k].name = dup_str(t[i].features[k].name);
        f[k].category = dup_str(t[i].features[k].category);
      }
      c[i].features = f;
    }
  }
  return c;
}

static void free_txns(risk_txn *c, const risk_txn *orig, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free((void *)c[i].currency);
    free((void *)c[i].country);
    free((void *)c[i].channel);
    if (c[i].features != orig[i].features) {
      for (size_t k = 0; k < c[i].n_features; k++) {
        free((void *)c[i].features[k].name);
        free((void *)c[i].features[k].category);
      }
      free((void *)c[i].features);
    }
  }
  free(c);
}

static void *dup_mem(const void *p, size_t n) {
  if (!p) return NULL;
  void *c = malloc(n ? n : 1);
  memcpy(c, p, n);
  return c;
}

/* ------------------------------------------------------------------ deciders */

static const char bad_utf8[] = {'U', (char)0xff, 'D', 0};

static risk_txn good_txn(uint64_t id, const risk_feature *f, size_t n) {
  risk_txn t;
  memset(&t, 0, sizeof t);
  t.id = id;
  t.entity = 1 + id % 31;
  t.timestamp_ms = 1767571200000LL + (int64_t)(id % 100000) * 1000;
  t.amount = 10.0 + (double)(id % 500);
  t.currency = "USD";
  t.mcc = 5411;
  t.country = "US";
  t.channel = "ecom";
  t.device = 1 + id % 7;
  t.features = f;
  t.n_features = n;
  return t;
}

static const risk_feature good_f[2] = {{"hour", 14.0, NULL}, {"txn_count_1h", 2.0, NULL}};
static const risk_feature unknown_f[1] = {{"no_such_feature", 1.0, NULL}};
static const risk_feature null_name_f[1] = {{NULL, 1.0, NULL}};
static const risk_feature utf8_name_f[1] = {{bad_utf8, 1.0, NULL}};
static const risk_feature range_f[1] = {{"hour", 1e300, NULL}};
static const risk_feature nan_f[1] = {{"hour", NAN, NULL}};

#define N_TXN_CASES 13
/* Case `k` of transaction `id`, with its expected code. */
static risk_txn txn_case(int k, uint64_t id, risk_result *expect, const char **what) {
  risk_txn t = good_txn(id, good_f, 2);
  *expect = RISK_ERR_TRANSACTION;
  switch (k) {
    case 0: *what = "good"; *expect = RISK_OK; break;
    case 1: *what = "hard-rule amount"; *expect = RISK_OK; t.amount = 9500.0; break;
    case 2: *what = "NaN feature"; *expect = RISK_OK; t.features = nan_f; t.n_features = 1; break;
    case 3: *what = "NULL currency"; *expect = RISK_ERR_NULL; t.currency = NULL; break;
    case 4: *what = "bad UTF-8 currency"; *expect = RISK_ERR_UTF8; t.currency = bad_utf8; break;
    case 5: *what = "unknown feature"; t.features = unknown_f; t.n_features = 1; break;
    case 6: *what = "negative amount"; t.amount = -5.0; break;
    case 7: *what = "negative timestamp"; t.timestamp_ms = -1000; break;
    case 8: *what = "NaN amount"; t.amount = NAN; break;
    case 9: *what = "NULL feature name"; *expect = RISK_ERR_NULL; t.features = null_name_f; t.n_features = 1; break;
    case 10: *what = "bad UTF-8 feature name"; *expect = RISK_ERR_UTF8; t.features = utf8_name_f; t.n_features = 1; break;
    case 11: *what = "feature out of f32 range"; t.features = range_f; t.n_features = 1; break;
    default: *what = "too many features"; *expect = RISK_ERR_INVALID; t.n_features = 1000000; break;
  }
  return t;
}

static int check_decision(const risk_decision *d, uint64_t id, const char *what) {
  if (d->txn != id || d->action > RISK_ACTION_DECLINE || d->n_reasons > RISK_MAX_REASONS ||
      !(d->score >= 0.0f && d->score <= 1.0f)) {
    fprintf(stderr, "UNEXPECTED decision (%s): txn %llu (want %llu) action %u reasons %u score %f\n",
            what, (unsigned long long)d->txn, (unsigned long long)id, d->action, d->n_reasons,
            (double)d->score);
    atomic_fetch_add(&unexpected, 1);
    return 0;
  }
  return 1;
}

#define N_JSON_CASES 11
static const char *json_case(int k, char *buf, size_t cap, uint64_t id, size_t *len,
                             risk_result *expect, const char **what) {
  *expect = RISK_ERR_JSON;
  const char *p = buf;
  switch (k) {
    case 0:
      *what = "good";
      *expect = RISK_OK;
      snprintf(buf, cap,
               "{\"id\": %llu, \"entity\": 7, \"timestamp_ms\": 1767571200000, \"amount\": %u.5, "
               "\"currency\": \"EUR\", \"channel\": \"pos\", \"features\": {\"hour\": 3, "
               "\"txn_count_1h\": null}}",
               (unsigned long long)id, (unsigned)(id % 900));
      break;
    case 1: *what = "truncated"; p = "{\"amount\": 1, "; break;
    case 2: *what = "not an object"; p = "[1, 2]"; break;
    case 3: *what = "unknown key"; p = "{\"amount\": 1, \"currency\": \"USD\", \"bogus\": 1}"; break;
    case 4: *what = "repeated key"; p = "{\"amount\": 1, \"amount\": 2, \"currency\": \"USD\"}"; break;
    case 5: *what = "negative amount"; *expect = RISK_ERR_TRANSACTION; p = "{\"amount\": -3, \"currency\": \"USD\"}"; break;
    case 6:
      *what = "negative timestamp";
      *expect = RISK_ERR_TRANSACTION;
      p = "{\"amount\": 3, \"currency\": \"USD\", \"timestamp_ms\": -5}";
      break;
    case 7: *what = "unknown feature"; *expect = RISK_ERR_TRANSACTION; p = "{\"amount\": 3, \"currency\": \"USD\", \"features\": {\"nope\": 1}}"; break;
    case 8: *what = "bad UTF-8"; *expect = RISK_ERR_UTF8; p = "{\"amount\": 3, \"currency\": \"\xff\"}"; break;
    case 9: *what = "NULL text"; *expect = RISK_ERR_NULL; *len = 10; return NULL;
    default: *what = "oversized length"; *expect = RISK_ERR_INVALID; *len = (size_t)1 << 30; return "{}";
  }
  *len = strlen(p);
  return p;
}

/* One decider round; returns how many RISK_ERR_HANDLE it saw. */
static int decide_round(uint64_t id, unsigned r) {
  int handles = 0;
  risk_result expect, rc;
  const char *what;

  /* risk_engine_decide: one case, plus now and then NULL arguments */
  int k = (int)(r % N_TXN_CASES);
  risk_txn t = txn_case(k, id, &expect, &what);
  risk_txn *tc = dup_txns(&t, 1);
  risk_decision *d = malloc(sizeof *d);
  rc = risk_engine_decide(engine, tc, d);
  if (record(F_DECIDE, rc, BIT(expect), ENGINE_GONE, &engine_freeing, what) && rc == RISK_OK)
    check_decision(d, id, what);
  handles += rc == RISK_ERR_HANDLE;
  if (r % 7 == 0) {
    rc = risk_engine_decide(engine, NULL, d);
    record(F_DECIDE, rc, BIT(RISK_ERR_NULL), ENGINE_GONE, &engine_freeing, "NULL txn");
    rc = risk_engine_decide(engine, tc, NULL);
    record(F_DECIDE, rc, BIT(RISK_ERR_NULL), ENGINE_GONE, &engine_freeing, "NULL out");
    rc = risk_engine_decide(NULL, tc, d);
    record(F_DECIDE, rc, BIT(RISK_ERR_NULL), 0, NULL, "NULL engine");
  }
  free_txns(tc, &t, 1);

  /* risk_engine_decide_json */
  char buf[512];
  size_t len = 0;
  const char *j = json_case((int)(r % N_JSON_CASES), buf, sizeof buf, id + 1, &len, &expect, &what);
  char *jc = len < sizeof buf ? dup_mem(j, len) : NULL; /* the oversized case is not read */
  rc = risk_engine_decide_json(engine, (const uint8_t *)(jc ? jc : j), len, d);
  free(jc);
  if (record(F_DECIDE_JSON, rc, BIT(expect), ENGINE_GONE, &engine_freeing, what) && rc == RISK_OK)
    check_decision(d, id + 1, what);
  handles += rc == RISK_ERR_HANDLE;
  free(d);

  /* risk_engine_decide_batch: 6 items, a rotating mix of cases */
  enum { B = 6 };
  risk_txn batch[B];
  risk_result want[B];
  const char *item_what[B];
  for (int i = 0; i < B; i++)
    batch[i] = txn_case((int)((r + (unsigned)i * 5) % N_TXN_CASES), id + 2 + (uint64_t)i, &want[i], &item_what[i]);
  risk_txn *bc = dup_txns(batch, B);
  risk_decision *out = malloc(B * sizeof *out);
  risk_result *item = malloc(B * sizeof *item);
  for (int i = 0; i < B; i++) item[i] = 0xEEEEu;
  switch (r % 5) {
    case 0: /* NULL outputs */
      rc = risk_engine_decide_batch(engine, bc, B, NULL, item);
      record(F_BATCH, rc, BIT(RISK_ERR_NULL), ENGINE_GONE, &engine_freeing, "NULL out");
      break;
    case 1: /* empty batch, NULL arrays: allowed */
      rc = risk_engine_decide_batch(engine, NULL, 0, NULL, NULL);
      record(F_BATCH, rc, BIT(RISK_OK), ENGINE_GONE, &engine_freeing, "empty");
      break;
    case 2: /* too large (not read: refused on the count) */
      rc = risk_engine_decide_batch(engine, bc, (size_t)RISK_MAX_BATCH + 1, out, item);
      record(F_BATCH, rc, BIT(RISK_ERR_INVALID), ENGINE_GONE, &engine_freeing, "oversized");
      break;
    default:
      rc = risk_engine_decide_batch(engine, bc, B, out, item);
      if (record(F_BATCH, rc, BIT(RISK_OK), ENGINE_GONE, &engine_freeing, "mixed") && rc == RISK_OK)
        for (int i = 0; i < B; i++)
          if (record(F_BATCH_ITEM, item[i], BIT(want[i]), ENGINE_GONE, &engine_freeing, item_what[i]) &&
              item[i] == RISK_OK)
            check_decision(&out[i], id + 2 + (uint64_t)i, item_what[i]);
      break;
  }
  handles += rc == RISK_ERR_HANDLE;
  free_txns(bc, batch, B);
  free(out);
  free(item);
  return handles;
}

static unsigned rounds;

static void *decider(void *arg) {
  uint64_t base = ((uint64_t)(uintptr_t)arg + 1) * 100000000ull;
  int handles = 0;
  for (unsigned r = 0; handles < STOP_AFTER; r++) {
    handles += decide_round(base + (uint64_t)r * 16, r * 2654435761u >> 7);
    if (r + 1 == rounds) atomic_fetch_add(&deciders_done, 1);
  }
  return NULL;
}

/* ------------------------------------------------------------------ the others */

static void *poller(void *arg) {
  unsigned timeout = (unsigned)(uintptr_t)arg; /* 0 and 3 ms */
  int handles = 0;
  while (handles < STOP_AFTER) {
    risk_verdict *vp = calloc(1, sizeof *vp);
    risk_result rc = risk_subscription_poll(sub, timeout, vp);
    risk_verdict v = *vp;
    free(vp);
    if (record(F_POLL, rc, BIT(RISK_OK) | BIT(RISK_ERR_EMPTY), SUB_GONE, &sub_freeing, "poll") &&
        rc == RISK_OK) {
      if (v.ticket == 0 || !(v.score >= 0.0f && v.score <= 1.0f)) {
        fprintf(stderr, "UNEXPECTED verdict: ticket %llu score %f\n", (unsigned long long)v.ticket,
                (double)v.score);
        atomic_fetch_add(&unexpected, 1);
      }
      atomic_fetch_add(&verdicts_seen, 1);
    }
    if (rc == RISK_ERR_CLOSED) sleep_us(1000); /* closed: no spin while waiting for the free */
    handles += rc == RISK_ERR_HANDLE;
    if (handles == 0 && (rc == RISK_ERR_EMPTY || rc == RISK_ERR_CLOSED)) {
      /* a NULL output now and then */
      rc = risk_subscription_poll(sub, 0, NULL);
      record(F_POLL, rc, BIT(RISK_ERR_NULL), SUB_GONE, &sub_freeing, "NULL out");
    }
  }
  return NULL;
}

static const char *rules_text(int valid, unsigned n) {
  static char buf[512]; /* only the reloader thread (and main, before it starts) writes */
  if (!valid) return "version \"broken\"\nrule R { when amount >\n";
  snprintf(buf, sizeof buf,
           "version \"stress-%u\"\n"
           "rule BIG {\n  when amount > 400\n  score 0.%u\n  reason \"BIG_AMOUNT\"\n}\n"
           "rule HUGE {\n  when amount > 9000\n  decline\n  hard\n  reason \"HUGE_AMOUNT\"\n}\n",
           n, 1 + n % 8);
  return buf;
}

static int write_rules(int valid, unsigned n) {
  char tmp[4096], dst[4096];
  snprintf(tmp, sizeof tmp, "%s/stress.rules.tmp", workdir);
  snprintf(dst, sizeof dst, "%s/stress.rules", workdir);
  FILE *f = fopen(tmp, "w");
  if (!f) return perror(tmp), -1;
  const char *text = rules_text(valid, n);
  if (fwrite(text, 1, strlen(text), f) != strlen(text) || fclose(f) != 0) return perror(tmp), -1;
  if (rename(tmp, dst) != 0) return perror("rename"), -1; /* atomic replacement */
  return 0;
}

static void *reloader(void *arg) {
  (void)arg;
  int handles = 0;
  for (unsigned n = 1; handles < STOP_AFTER; n++) {
    int valid = n % 2 == 0 || n % 3 == 0;
    if (write_rules(valid, n) != 0) {
      atomic_fetch_add(&unexpected, 1);
      return NULL;
    }
    risk_result rc = risk_engine_reload_rules(engine);
    record(F_RELOAD, rc, BIT(valid ? RISK_OK : RISK_ERR_RELOAD), ENGINE_GONE, &engine_freeing,
           valid ? "valid file" : "broken file");
    handles += rc == RISK_ERR_HANDLE;
    atomic_fetch_add(&reloads_done, 1);
    sleep_us(2000);
  }
  return NULL;
}

static void *metrics(void *arg) {
  (void)arg;
  int handles = 0;
  char *buf = NULL;
  size_t cap = 0;
  while (handles < STOP_AFTER) {
    size_t len = 0;
    risk_result rc = risk_engine_metrics_json(engine, buf, cap, &len);
    if (record(F_METRICS, rc, BIT(RISK_OK) | BIT(RISK_ERR_BUFFER_TOO_SMALL), ENGINE_GONE,
               &engine_freeing, "metrics")) {
      if (rc == RISK_ERR_BUFFER_TOO_SMALL) {
        free(buf);
        cap = len + 64; /* the next call may need more: the counts grow */
        buf = malloc(cap);
      } else if (rc == RISK_OK) {
        if (strlen(buf) != len || strstr(buf, "\"decisions\"") == NULL) {
          fprintf(stderr, "UNEXPECTED metrics text (%zu bytes)\n", len);
          atomic_fetch_add(&unexpected, 1);
        }
        atomic_fetch_add(&metrics_done, 1);
      }
    }
    handles += rc == RISK_ERR_HANDLE;
    rc = risk_engine_metrics_json(engine, NULL, 0, NULL);
    record(F_METRICS, rc, BIT(RISK_ERR_NULL), ENGINE_GONE, &engine_freeing, "NULL len");
    sleep_us(1000);
  }
  free(buf);
  return NULL;
}

/* ------------------------------------------------------------------ main */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *toml =
    "[schema]\n"
    "fields = [\n"
    "  { name = \"amount\", kind = \"numeric\", required = true },\n"
    "  { name = \"hour\", kind = \"numeric\", required = false },\n"
    "  { name = \"txn_count_1h\", kind = \"numeric\", required = false },\n"
    "]\n"
    "[rules.scorer]\nkind = \"rules\"\npath = \"stress.rules\"\n"
    "[fast]\ndeadline_ms = 50\n"
    "[fast.scorer]\nkind = \"constant\"\nprobability = 0.5\n"
    "[thresholds]\napprove_below = 0.3\ndecline_at = 0.7\nhard_rule_override = true\n"
    "static_action = \"review\"\n"
    "[gray]\nband = [0.3, 0.7]\nqueue_capacity = 256\n"
    "[deep]\nbudget_ms = 500\nmax_batch = 8\nmax_wait_ms = 2\nworkers = 1\n"
    "subscriber_capacity = 64\n"
    "[deep.scorer]\nkind = \"constant\"\nprobability = 0.9\n"
    "[pool]\nfast_workers = 2\nspin_us = 0\nasync_workers = 1\n";

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: stress WORKDIR [DECIDERS [ROUNDS [sub-first|engine-first]]]\n");
    return 2;
  }
  workdir = argv[1];
  int n_deciders = argc > 2 ? atoi(argv[2]) : 4;
  rounds = argc > 3 ? (unsigned)atoi(argv[3]) : 200;
  int engine_first = argc > 4 && strcmp(argv[4], "engine-first") == 0;
  if (n_deciders < 1 || n_deciders > 256 || rounds < 1 ||
      (argc > 4 && !engine_first && strcmp(argv[4], "sub-first") != 0)) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  double t0 = now_s();
  if (write_rules(1, 0) != 0) return 1;
  risk_result rc = risk_engine_new_from_toml((const uint8_t *)toml, strlen(toml), workdir, &engine);
  if (rc != RISK_OK) {
    fprintf(stderr, "engine: %u %s\n", rc, risk_last_error());
    return 1;
  }
  rc = risk_engine_subscribe(engine, &sub);
  if (rc != RISK_OK) {
    fprintf(stderr, "subscribe: %u %s\n", rc, risk_last_error());
    return 1;
  }

  pthread_t th[256 + 4];
  int n = 0;
  for (int i = 0; i < n_deciders; i++) pthread_create(&th[n++], NULL, decider, (void *)(uintptr_t)i);
  pthread_create(&th[n++], NULL, poller, (void *)(uintptr_t)0);
  pthread_create(&th[n++], NULL, poller, (void *)(uintptr_t)3);
  pthread_create(&th[n++], NULL, reloader, NULL);
  pthread_create(&th[n++], NULL, metrics, NULL);

  /* Free while everything runs, once the deciders did their rounds and the others some work. */
  double limit = t0 + 600.0;
  while (atomic_load(&deciders_done) < n_deciders || atomic_load(&reloads_done) < 6 ||
         atomic_load(&verdicts_seen) < 1 || atomic_load(&metrics_done) < 2) {
    if (now_s() > limit) {
      fprintf(stderr,
              "UNEXPECTED: no progress in 10 min (deciders done %d/%d, reloads %d, verdicts %d, metrics %d)\n",
              atomic_load(&deciders_done), n_deciders, atomic_load(&reloads_done),
              atomic_load(&verdicts_seen), atomic_load(&metrics_done));
      atomic_fetch_add(&unexpected, 1);
      break;
    }
    sleep_us(5000);
  }
  double t_free = now_s();
  if (engine_first) {
    atomic_store(&engine_freeing, 1);
    atomic_store(&sub_freeing, 1); /* an engine going away closes its subscriptions */
    risk_engine_free(engine);
    sleep_us(20000);
    risk_subscription_free(sub);
  } else {
    atomic_store(&sub_freeing, 1);
    risk_subscription_free(sub);
    sleep_us(20000);
    atomic_store(&engine_freeing, 1);
    risk_engine_free(engine);
  }
  risk_engine_free(engine);   /* documented: ignored */
  risk_subscription_free(sub); /* likewise */
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  double t_end = now_s();

  printf("stress: %d deciders x %u rounds, 2 pollers, 1 reloader, 1 metrics reader; %s\n",
         n_deciders, rounds, engine_first ? "engine freed first" : "subscription freed first");
  printf("stress: %.1f s before the frees, %.1f s after; %d verdicts, %d reloads, %d metrics reads\n",
         t_free - t0, t_end - t_free, atomic_load(&verdicts_seen), atomic_load(&reloads_done),
         atomic_load(&metrics_done));
  unsigned long total = 0;
  for (int f = 0; f < N_FNS; f++) {
    printf("  %-26s", fn_name[f]);
    for (unsigned c = 0; c < N_CODES; c++) {
      unsigned long v = atomic_load(&counts[f][c]);
      if (v) printf(" %s=%lu", code_name(c), v);
      if (f != F_BATCH_ITEM) total += v;
    }
    printf("\n");
  }
  unsigned long bad = atomic_load(&unexpected);
  printf("stress: %lu calls, %lu unexpected\n", total, bad);
  if (atomic_load(&counts[F_POLL][RISK_OK]) == 0) {
    fprintf(stderr, "UNEXPECTED: no verdict was polled\n");
    bad++;
  }
  return bad ? 1 : 0;
}
