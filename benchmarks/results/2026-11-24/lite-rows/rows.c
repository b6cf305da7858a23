// SQLite alone (ADR 0068): `settee-bench lite`'s raw row, Lite's version-4 row and two narrower layouts, the
// benchmark's ~1 KiB bodies, all rows in one transaction with Lite's PRAGMAs; CPU seconds (user + system) of the
// inserts and the commit (its checkpoint), the file's page count, and CPU seconds of one change-feed read of every
// row after reopening. The revision stand-in is a deterministic
// pseudo-hash (the same work for every layout, raw included). Build and run:
//   gcc -O2 -o rows rows.c -lsqlite3 && ./rows 100000 3 /tmp
// Layouts: raw = (id TEXT PRIMARY KEY, body); lite_v4 = Schema.docsColumns of version 4 with Lite's INSERT;
// binwinner = lite_v4 with the winner as a 17-byte blob (generation + MD5) and doc_id NULL;
// ids_split = docs (seq, id, doc_id NULL, tree, body) + ids (id PRIMARY KEY, seq, winner, deleted, type)
// WITHOUT ROWID instead of the UNIQUE index on docs.id; ids_split_docid = the same with doc_id stored.
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

enum { RAW, LITE_V4, BIN_WINNER, IDS_SPLIT, IDS_SPLIT_DOCID, LAYOUTS };
static const char *names[LAYOUTS] = {"raw", "lite_v4", "binwinner", "ids_split", "ids_split_docid"};
static int documents;
static const char *directory;
static char filler[2000];

static double cpu(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// settee-bench's LiteCommand.body(index:size: 1024), serialized as Lite stores it.
static int body(int i, char *out) {
    return sprintf(out, "{\"type\":\"note\",\"n\":%d,\"title\":\"note %d\",\"done\":%s,\"text\":\"%s\"}", i, i,
                   i % 2 ? "false" : "true", filler);
}

static void exec(sqlite3 *db, const char *sql) {
    char *error = 0;
    if (sqlite3_exec(db, sql, 0, 0, &error) != SQLITE_OK) {
        fprintf(stderr, "%s: %s\n", sql, error);
        exit(1);
    }
}

static sqlite3_stmt *prepare(sqlite3 *db, const char *sql) {
    sqlite3_stmt *s = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &s, 0) != SQLITE_OK) {
        fprintf(stderr, "%s: %s\n", sql, sqlite3_errmsg(db));
        exit(1);
    }
    return s;
}

static void step(sqlite3_stmt *s) {
    if (sqlite3_step(s) != SQLITE_DONE) {
        fprintf(stderr, "step: %s\n", sqlite3_errmsg(sqlite3_db_handle(s)));
        exit(1);
    }
    sqlite3_reset(s);
}

static void removeFiles(const char *path) {
    char p[400];
    unlink(path);
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
}

static const char *idsTable = "CREATE TABLE ids (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, winner TEXT NOT NULL, "
                              "deleted INTEGER NOT NULL, type TEXT) WITHOUT ROWID";

// Statement `a` (and `b` for the split layouts) take ?1 seq, ?2 id, ?3 doc_id, ?4 winner, ?5 deleted, ?6 type,
// ?7 tree, ?8 body; each binds the ones it names.
static void createLayout(sqlite3 *db, int layout, sqlite3_stmt **a, sqlite3_stmt **b) {
    switch (layout) {
    case RAW:
        exec(db, "CREATE TABLE docs (id TEXT PRIMARY KEY, body BLOB NOT NULL)");
        *a = prepare(db, "INSERT INTO docs VALUES (?2, ?8)");
        break;
    case LITE_V4:
        exec(db, "CREATE TABLE docs (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, doc_id INTEGER NOT NULL, "
                 "winner TEXT NOT NULL, deleted INTEGER NOT NULL, type TEXT, tree BLOB NOT NULL, body BLOB)");
        *a = prepare(db, "INSERT INTO docs (seq, id, doc_id, winner, deleted, type, tree, body) "
                         "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (id) DO NOTHING");
        break;
    case BIN_WINNER:
        exec(db, "CREATE TABLE docs (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, doc_id INTEGER, "
                 "winner BLOB NOT NULL, deleted INTEGER NOT NULL, type TEXT, tree BLOB NOT NULL, body BLOB)");
        *a = prepare(db, "INSERT INTO docs (seq, id, doc_id, winner, deleted, type, tree, body) "
                         "VALUES (?1, ?2, NULL, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (id) DO NOTHING");
        break;
    case IDS_SPLIT:
    case IDS_SPLIT_DOCID:
        exec(db, "CREATE TABLE docs (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, doc_id INTEGER, "
                 "tree BLOB NOT NULL, body BLOB)");
        exec(db, idsTable);
        *a = prepare(db, "INSERT INTO ids VALUES (?2, ?1, ?4, ?5, ?6) ON CONFLICT (id) DO NOTHING");
        *b = prepare(db, layout == IDS_SPLIT
                             ? "INSERT INTO docs (seq, id, doc_id, tree, body) VALUES (?1, ?2, NULL, ?7, ?8)"
                             : "INSERT INTO docs (seq, id, doc_id, tree, body) VALUES (?1, ?2, ?1, ?7, ?8)");
        break;
    }
}

static void bindRow(sqlite3_stmt *s, int i, const char *id, int idLength, const char *winner,
                    const unsigned char *binaryWinner, int binary, const char *bodyBytes, int bodyLength) {
    int n = sqlite3_bind_parameter_count(s);
    for (int p = 1; p <= n; p++) {
        const char *name = sqlite3_bind_parameter_name(s, p);
        int k = name ? atoi(name + 1) : p;
        switch (k) {
        case 1: case 3: sqlite3_bind_int64(s, p, i + 1); break;
        case 2: sqlite3_bind_text(s, p, id, idLength, SQLITE_STATIC); break;
        case 4:
            if (binary) sqlite3_bind_blob(s, p, binaryWinner, 17, SQLITE_STATIC);
            else sqlite3_bind_text(s, p, winner, 34, SQLITE_STATIC);
            break;
        case 5: sqlite3_bind_int(s, p, 0); break;
        case 6: sqlite3_bind_text(s, p, "note", 4, SQLITE_STATIC); break;
        case 7: sqlite3_bind_blob(s, p, "", 0, SQLITE_STATIC); break;
        case 8: sqlite3_bind_blob(s, p, bodyBytes, bodyLength, SQLITE_STATIC); break;
        }
    }
}

static double run(int layout, int *pages, double *commit, double *feed) {
    char path[300];
    snprintf(path, sizeof path, "%s/lite-rows-%d.db", directory, layout);
    removeFiles(path);
    sqlite3 *db;
    sqlite3_open(path, &db);
    exec(db, "PRAGMA page_size=4096");
    exec(db, "PRAGMA auto_vacuum=INCREMENTAL");
    exec(db, "PRAGMA journal_mode=WAL");
    exec(db, "PRAGMA synchronous=NORMAL");
    exec(db, "PRAGMA wal_autocheckpoint=1000");
    exec(db, "PRAGMA cache_size=-4096");
    sqlite3_stmt *a = 0, *b = 0;
    createLayout(db, layout, &a, &b);
    static const char hex[] = "0123456789abcdef";
    char bodyBytes[2100], id[32], winner[40];
    unsigned char binaryWinner[17];
    double t0 = cpu();
    exec(db, "BEGIN");
    for (int i = 0; i < documents; i++) {
        int n = body(i, bodyBytes);
        int idLength = sprintf(id, "doc-%d", i);
        // A stand-in for the revision digest: the same work for every layout, raw included.
        unsigned h = 2166136261u;
        for (int k = 0; k < n; k++) h = (h ^ (unsigned char)bodyBytes[k]) * 16777619u;
        winner[0] = '1';
        winner[1] = '-';
        for (int k = 0; k < 32; k++) h = h * 1103515245u + 12345u, winner[2 + k] = hex[(h >> 16) & 15];
        binaryWinner[0] = 2;
        for (int k = 0; k < 16; k++) h = h * 1103515245u + 12345u, binaryWinner[1 + k] = (h >> 16) & 255;
        sqlite3_stmt *statements[2] = {a, b};
        for (int j = 0; j < 2 && statements[j]; j++) {
            bindRow(statements[j], i, id, idLength, winner, binaryWinner, layout == BIN_WINNER, bodyBytes, n);
            step(statements[j]);
        }
    }
    double t1 = cpu();
    exec(db, "COMMIT");
    double total = cpu() - t0;
    *commit = cpu() - t1;
    sqlite3_stmt *q = prepare(db, "PRAGMA page_count");
    sqlite3_step(q);
    *pages = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    sqlite3_finalize(a);
    sqlite3_finalize(b);
    sqlite3_close(db);

    // The change feed's read of every row after reopening (Store.changes' columns; the split layouts join ids).
    sqlite3_open(path, &db);
    exec(db, "PRAGMA cache_size=-4096");
    const char *sql = layout == RAW ? "SELECT rowid, id FROM docs WHERE rowid > 0 ORDER BY rowid"
                      : layout < IDS_SPLIT
                          ? "SELECT seq, id, winner, deleted, type FROM docs WHERE seq > 0 ORDER BY seq"
                          : "SELECT d.seq, d.id, i.winner, i.deleted, i.type FROM docs d JOIN ids i ON i.id = d.id "
                            "WHERE d.seq > 0 ORDER BY d.seq";
    double f0 = cpu();
    q = prepare(db, sql);
    int rows = 0;
    while (sqlite3_step(q) == SQLITE_ROW) rows += sqlite3_column_bytes(q, 1) > 0;
    sqlite3_finalize(q);
    *feed = cpu() - f0;
    sqlite3_close(db);
    removeFiles(path);
    if (rows != documents) {
        fprintf(stderr, "%s: the feed read %d rows of %d\n", names[layout], rows, documents);
        exit(1);
    }
    return total;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: rows DOCUMENTS ROUNDS DIRECTORY\n");
        return 2;
    }
    documents = atoi(argv[1]);
    int rounds = atoi(argv[2]);
    directory = argv[3];
    int k = (1024 - 96) / 12;
    for (int i = 0; i < k; i++) memcpy(filler + 12 * i, "lorem ipsum ", 12);
    filler[12 * k] = 0;
    for (int r = 0; r < rounds; r++) {
        double raw = 0;
        for (int layout = 0; layout < LAYOUTS; layout++) {
            int pages;
            double commit, feed;
            double t = run(layout, &pages, &commit, &feed);
            if (layout == RAW) raw = t;
            printf("%s cpu %.3f (commit %.3f) pages %d %.2fx feed %.3f | ", names[layout], t, commit, pages, raw / t,
                   feed);
        }
        printf("\n");
        fflush(stdout);
    }
    return 0;
}
