/*
 * Space kept in reserve in the coordinator's state folder: a file, `stagecraft.db.reserve`, of
 * COORD_RESERVE_BYTES that holds disk blocks while the disk has room. When the disk fills, the
 * store frees it (coord_reserve_spend) so that the jobs it already accepted go on being
 * recorded (progress, recoveries, their end) while it refuses new ones; it makes the file again
 * (coord_reserve_refill) once the disk has twice the reserve free. Used by store.c only.
 */
#ifndef COORD_STORE_RESERVE_H
#define COORD_STORE_RESERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define COORD_RESERVE_BYTES ((size_t)2 << 20)

typedef struct {
    char path[4096];
    char dir[4096];
    size_t bytes;
    bool held;                /* the file holds its blocks */
    int64_t next_try_mono_ms; /* the next refill may try from then on */
} coord_reserve;

/* Sets the reserve of folder `dir` up and tries to make its file (held tells whether it did). */
void coord_reserve_init(coord_reserve *r, const char *dir, size_t bytes);

/* Frees the reserve's blocks; true when it held them (there is that much more room now). */
bool coord_reserve_spend(coord_reserve *r);

/* Makes the reserve's file again when the disk has room for it twice over; tries at most once a
 * second unless `now` is true. Returns held. */
bool coord_reserve_refill(coord_reserve *r, bool now);

#endif /* COORD_STORE_RESERVE_H */
