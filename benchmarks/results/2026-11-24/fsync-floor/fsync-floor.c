// fsync-floor: what this disk allows for one durable commit (issue 19, ADR 0072).
//
// Each "commit" writes some bytes to a file and then calls fdatasync, the way a store with group commit
// persists one batch of sets before answering them. Modes:
//   append G      G records of 1,100 bytes (a 1 KiB set plus its framing, as redis's AOF appends it) appended
//                 to a log file, then fdatasync.
//   wal N P       N frames of P bytes (each a 24-byte frame header and a page, two pwrites as SQLite's WAL does)
//                 appended to a WAL-like file that is reused from offset 0 after 4,096 frames (as SQLite
//                 restarts its WAL after a checkpoint), then fdatasync.
//   random N P    N pages of P bytes written at random page-aligned offsets of a 256 MiB file, then fdatasync
//                 (the checkpoint's writes into the database file, for comparison).
// Prints commits/s, microseconds per commit (mean, p50, p99) and bytes per commit. Single-threaded: one commit at
// a time, which is what a store answering depth-1 clients after each fsync can overlap at best with the next
// batch's gathering, not with another fsync of the same file.
//
// Usage: fsync-floor DIR SECONDS MODE ARGS...   (e.g. fsync-floor /tmp/f 3 append 32)
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void must(int ok, const char *what) {
    if (!ok) { perror(what); exit(1); }
}

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: %s DIR SECONDS append G | wal N P | random N P\n", argv[0]); return 2; }
    const char *dir = argv[1];
    double seconds = atof(argv[2]);
    const char *mode = argv[3];
    int n = atoi(argv[4]);
    int page = argc > 5 ? atoi(argv[5]) : 1100;
    must(n > 0 && page > 0 && page <= 65536, "arguments");

    char path[4096];
    snprintf(path, sizeof path, "%s/fsync-floor-%s-%d-%d.dat", dir, mode, n, page);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    must(fd >= 0, "open");

    const off_t walFrames = 4096, randomFileBytes = 256L << 20;
    size_t rec = (size_t)page;
    char *buf = malloc(rec + 24);
    must(buf != NULL, "malloc");
    for (size_t i = 0; i < rec + 24; i++) buf[i] = (char)(rand() & 0xff);

    // Preallocate (written, not sparse) the reused WAL or the random-write file so the measured commits
    // overwrite existing blocks, as a warmed-up store does; the append log grows, as redis's AOF does.
    if (strcmp(mode, "wal") == 0 || strcmp(mode, "random") == 0) {
        off_t size = strcmp(mode, "wal") == 0 ? walFrames * (off_t)(rec + 24) : randomFileBytes;
        char *zero = calloc(1, 1 << 20);
        must(zero != NULL, "calloc");
        for (off_t o = 0; o < size; o += 1 << 20) must(pwrite(fd, zero, 1 << 20, o) == 1 << 20, "prealloc");
        must(fdatasync(fd) == 0, "fdatasync");
        free(zero);
    }

    size_t cap = 1 << 20, count = 0;
    double *lat = malloc(cap * sizeof(double));
    must(lat != NULL, "malloc");
    off_t appendAt = 0, walFrame = 0;
    uint64_t seed = 88172645463325252ULL;
    double start = now(), end = start + seconds;
    size_t bytesPerCommit = 0;
    while (now() < end && count < cap) {
        double t0 = now();
        bytesPerCommit = 0;
        for (int i = 0; i < n; i++) {
            buf[0] = (char)count; buf[1] = (char)i; // the bytes change every write
            if (strcmp(mode, "append") == 0) {
                must(pwrite(fd, buf, rec, appendAt) == (ssize_t)rec, "pwrite");
                appendAt += (off_t)rec; bytesPerCommit += rec;
            } else if (strcmp(mode, "wal") == 0) {
                off_t at = walFrame * (off_t)(rec + 24);
                must(pwrite(fd, buf, 24, at) == 24, "pwrite header");
                must(pwrite(fd, buf + 24, rec, at + 24) == (ssize_t)rec, "pwrite page");
                walFrame = (walFrame + 1) % walFrames; bytesPerCommit += rec + 24;
            } else {
                seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
                off_t at = (off_t)(seed % (uint64_t)(randomFileBytes / (off_t)rec)) * (off_t)rec;
                must(pwrite(fd, buf, rec, at) == (ssize_t)rec, "pwrite");
                bytesPerCommit += rec;
            }
        }
        must(fdatasync(fd) == 0, "fdatasync");
        lat[count++] = (now() - t0) * 1e6;
    }
    double elapsed = now() - start, sum = 0;
    for (size_t i = 0; i < count; i++) sum += lat[i];
    qsort(lat, count, sizeof(double), cmp);
    printf("%-6s n=%-3d bytes=%-6d commits=%-6zu commits/s=%-8.0f mean_us=%-7.0f p50_us=%-7.0f p99_us=%-7.0f "
           "bytes_per_commit=%zu\n",
           mode, n, page, count, count / elapsed, sum / count, lat[count / 2], lat[count * 99 / 100], bytesPerCommit);
    close(fd);
    unlink(path);
    return 0;
}
