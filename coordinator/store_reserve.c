/*
 * The state folder's reserve of disk space (see store_reserve.h).
 */
#include "coordinator/store_reserve.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "common/sc_util.h"

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Gives the file its blocks (allocated, not sparse); false, with no file left, when it cannot. */
static bool make_file(coord_reserve *r)
{
    int fd = open(r->path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return false;
    bool ok = posix_fallocate(fd, 0, (off_t)r->bytes) == 0 && fsync(fd) == 0;
    close(fd);
    if (!ok)
        unlink(r->path);
    return ok;
}

void coord_reserve_init(coord_reserve *r, const char *dir, size_t bytes)
{
    memset(r, 0, sizeof *r);
    sc_strlcpy(r->dir, dir, sizeof r->dir);
    snprintf(r->path, sizeof r->path, "%s/stagecraft.db.reserve", dir);
    r->bytes = bytes;
    /* a reserve left by an earlier run counts, whatever the disk has free now */
    r->held = make_file(r);
}

bool coord_reserve_spend(coord_reserve *r)
{
    if (!r->held)
        return false;
    r->held = false;
    r->next_try_mono_ms = mono_ms() + 1000;
    return unlink(r->path) == 0 || errno == ENOENT;
}

bool coord_reserve_refill(coord_reserve *r, bool now)
{
    if (r->held)
        return true;
    int64_t t = mono_ms();
    if (!now && t < r->next_try_mono_ms)
        return false;
    r->next_try_mono_ms = t + 1000;
    struct statvfs fs;
    if (statvfs(r->dir, &fs) != 0 || (uint64_t)fs.f_bavail * fs.f_frsize < 2 * (uint64_t)r->bytes)
        return false;
    r->held = make_file(r);
    return r->held;
}
