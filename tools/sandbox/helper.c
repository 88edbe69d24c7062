/* m3agent's per-command sandbox helper: the launcher's child work, without an interpreter.
 *
 * Used under bubblewrap, whose pid namespace already kills every leftover process, so the
 * helper does not fork or reap: it applies what the host decided (tools/sandbox/launch_spec.py,
 * helper.py) and execs the command. A Python launcher costs ~10 ms of CPU before its first
 * line (interpreter start) and ctypes as much again; this costs well under one.
 *
 *   helper STATUS_FD NTOK TOKEN... COMMAND...
 *
 * Tokens, applied in order (numbers in decimal):
 *   R which soft hard         setrlimit
 *   N which soft hard         setrlimit, plus the user's running processes (RLIMIT_NPROC
 *                             counts them all)
 *   L fs net scoped size      a Landlock ruleset handling these rights
 *   A path rights             grant rights beneath path (absent: skipped)
 *   E root rights dirr n x... rights beneath root except beneath the n paths x (siblings get
 *                             them, directories on the way only dirr: Landlock only grants)
 *   C root rights dirr n x... E for each child of root (the workspace root itself gets none)
 *   X                         no_new_privs, landlock_restrict_self
 *   S hex                     install this seccomp-BPF program
 *   P capset_nr last securebits   drop every capability (privileges.py says why)
 * Any failure exits 125 before the command runs (never unconfined); STATUS_FD gets "R" just
 * before exec, so the host can tell a command that ran from one that never started.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FAIL 125
#define FILE_RIGHTS (1ULL | 2ULL | 4ULL | (1ULL << 14) | (1ULL << 15))

struct ruleset_attr { uint64_t fs, net, scoped; };
struct path_beneath { uint64_t allowed; int32_t parent_fd; } __attribute__((packed));

static int ruleset = -1;
static uint64_t handled;

static void die(const char *what) {
    fprintf(stderr, "m3agent sandbox: could not apply a layer: %s: %s\n", what, strerror(errno));
    _exit(FAIL);
}

static unsigned long long num(const char *s) { return strtoull(s, NULL, 10); }

static void allow(const char *path, uint64_t rights) {
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return; /* absent in this view of the file system: nothing to grant */
    struct stat st;
    if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)) rights &= FILE_RIGHTS;
    rights &= handled;
    if (rights) {
        struct path_beneath pb = {rights, fd};
        if (syscall(445, ruleset, 1, &pb, 0) < 0) die(path);
    }
    close(fd);
}

static int under(const char *p, const char *root) {
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/') n--;
    if (n == 1 && root[0] == '/') return 1;
    return strncmp(p, root, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

static void grant_except(const char *root, uint64_t rights, char **ex, int n, uint64_t dirr);

/* grant_except on each entry of root (root itself gets nothing here). */
static void children(const char *root, uint64_t rights, char **ex, int n, uint64_t dirr) {
    DIR *d = opendir(root);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char child[4096];
        int len = snprintf(child, sizeof child, "%s/%s", strcmp(root, "/") ? root : "", e->d_name);
        if (len <= 0 || len >= (int)sizeof child) continue;
        struct stat st;
        if (lstat(child, &st) == 0 && S_ISLNK(st.st_mode)) continue; /* judged where it points */
        grant_except(child, rights, ex, n, dirr);
    }
    closedir(d);
}

static void grant_except(const char *root, uint64_t rights, char **ex, int n, uint64_t dirr) {
    char *inside[n > 0 ? n : 1];
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(ex[i], root) == 0) return;
        if (under(ex[i], root)) inside[k++] = ex[i];
    }
    if (k == 0) { allow(root, rights); return; }
    if (dirr) allow(root, dirr);
    children(root, rights, inside, k, dirr);
}

static long user_processes(void) {
    long count = 0;
    uid_t uid = getuid();
    DIR *d = opendir("/proc");
    if (!d) die("counting processes");
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, 0) == 0 && st.st_uid == uid) count++;
    }
    closedir(d);
    return count;
}

static void set_limit(int which, rlim_t soft, rlim_t hard) {
    struct rlimit old;
    if (getrlimit(which, &old) != 0) die("getrlimit");
    if (old.rlim_max != RLIM_INFINITY) {
        if (soft > old.rlim_max) soft = old.rlim_max;
        if (hard > old.rlim_max) hard = old.rlim_max;
    }
    struct rlimit rl = {soft, hard};
    if (setrlimit(which, &rl) != 0) die("setrlimit");
}

static void install_seccomp(const char *hex) {
    size_t n = strlen(hex) / 2;
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf || n % 8) { errno = EINVAL; die("seccomp program"); }
    for (size_t i = 0; i < n; i++) sscanf(hex + 2 * i, "%2hhx", &buf[i]);
    struct sock_fprog prog = {(unsigned short)(n / 8), (struct sock_filter *)buf};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("prctl(PR_SET_NO_NEW_PRIVS)");
    if (prctl(PR_SET_SECCOMP, 2, &prog, 0, 0) != 0) die("prctl(PR_SET_SECCOMP)");
}

static unsigned long long cap_field(const char *name) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long v = 0;
    size_t n = strlen(name);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, name, n)) v = strtoull(line + n + 1, NULL, 16);
    if (f) fclose(f);
    return v;
}

static void drop_privileges(long capset_nr, int last, int securebits) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("prctl(PR_SET_NO_NEW_PRIVS)");
    prctl(47, 4, 0, 0, 0); /* PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL */
    if (cap_field("CapPrm")) {
        unsigned long long bnd = cap_field("CapBnd");
        for (int cap = 0; cap <= last; cap++)
            if (bnd >> cap & 1 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) die("PR_CAPBSET_DROP");
        if (geteuid() == 0) prctl(PR_SET_SECUREBITS, securebits, 0, 0, 0);
    }
    struct { uint32_t version; int pid; } header = {0x20080522, 0};
    uint32_t data[6] = {0};
    if (syscall(capset_nr, &header, data) != 0) die("capset");
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: helper STATUS_FD NTOK TOKEN... COMMAND...\n"); return 2; }
    int status = atoi(argv[1]);
    int ntok = atoi(argv[2]);
    char **t = argv + 3, **end = argv + 3 + ntok;
    if (ntok < 0 || end >= argv + argc) { fprintf(stderr, "helper: no command\n"); return 2; }
    while (t < end) {
        char op = (*t++)[0];
        if (op == 'R') { set_limit(num(t[0]), num(t[1]), num(t[2])); t += 3; }
        else if (op == 'N') { /* RLIMIT_NPROC counts the user's processes already running */
            long n = user_processes();
            set_limit(num(t[0]), num(t[1]) + n, num(t[2]) + n);
            t += 3;
        }
        else if (op == 'L') {
            struct ruleset_attr a = {num(t[0]), num(t[1]), num(t[2])};
            handled = a.fs;
            ruleset = syscall(444, &a, (size_t)num(t[3]), 0);
            if (ruleset < 0) die("landlock_create_ruleset");
            t += 4;
        } else if (op == 'A') { allow(t[0], num(t[1])); t += 2; }
        else if (op == 'E' || op == 'C') {
            int n = atoi(t[3]);
            (op == 'E' ? grant_except : children)(t[0], num(t[1]), t + 4, n, num(t[2]));
            t += 4 + n;
        } else if (op == 'X') {
            if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("prctl(PR_SET_NO_NEW_PRIVS)");
            if (syscall(446, ruleset, 0) != 0) die("landlock_restrict_self");
            close(ruleset);
        } else if (op == 'S') { install_seccomp(t[0]); t += 1; }
        else if (op == 'P') { drop_privileges(num(t[0]), atoi(t[1]), atoi(t[2])); t += 3; }
        else { errno = EINVAL; die("unknown plan token"); }
    }
    if (status >= 0) {
        fcntl(status, F_SETFD, FD_CLOEXEC); /* the command never holds it */
        if (write(status, "R", 1) != 1) die("status pipe");
    }
    execvp(end[0], end);
    fprintf(stderr, "m3agent sandbox: cannot run %s: %s\n", end[0], strerror(errno));
    return 127;
}
