/*
 * The bench's stand-in for a container runtime's exec of a CNI plugin: posix_spawn (vfork, as
 * Go's os/exec clones), the network config on stdin from a file, stdout to a file, wait. Node's
 * own spawn forks the whole Node process and would add ~2 ms to every figure.
 *
 * Reads one call per line on stdin: plugin, CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS, config
 * file, output file and, optionally, CNI_ARGS, separated by tabs. Writes one line per call: exit status and wall time in
 * ms, from spawn to exit. Everything else (CNI_IFNAME=eth0, CNI_PATH) comes from argv[1].
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: spawn-timer CNI_PATH < calls\n");
    return 2;
  }
  char line[8192];
  setvbuf(stdout, NULL, _IOLBF, 0);
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\n")] = 0;
    char* f[7];
    char* save = NULL;
    int n = 0;
    for (char* t = strtok_r(line, "\t", &save); t && n < 7; t = strtok_r(NULL, "\t", &save)) f[n++] = t;
    if (n < 6) {
      printf("-1 0\n");
      continue;
    }
    char command[64], id[512], netns[1024], path[1024], cniArgs[1024];
    snprintf(command, sizeof command, "CNI_COMMAND=%s", f[1]);
    snprintf(id, sizeof id, "CNI_CONTAINERID=%s", f[2]);
    snprintf(netns, sizeof netns, "CNI_NETNS=%s", f[3]);
    snprintf(path, sizeof path, "CNI_PATH=%s", argv[1]);
    snprintf(cniArgs, sizeof cniArgs, "CNI_ARGS=%s", n == 7 ? f[6] : "");
    char* env[] = {command, id, netns, "CNI_IFNAME=eth0", path, "PATH=/usr/sbin:/usr/bin:/sbin:/bin", cniArgs, NULL};
    char* args[] = {f[0], NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, f[4], O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, f[5], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pid_t pid;
    int status = -1;
    if (posix_spawn(&pid, f[0], &fa, NULL, args, env) == 0 && waitpid(pid, &status, 0) == pid) status = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    clock_gettime(CLOCK_MONOTONIC, &b);
    posix_spawn_file_actions_destroy(&fa);
    printf("%d %.3f\n", status, (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6);
  }
  return 0;
}
