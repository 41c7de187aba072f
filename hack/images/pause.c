/*
 * The pause container of kubeherd's local cluster: PID 1 of every pod sandbox, holding the
 * pod's namespaces. It sleeps until SIGINT or SIGTERM, then exits 0, and reaps any child that
 * gets reparented to it (processes of containers that share the pod's PID namespace).
 *
 * The signals stay blocked and are taken with sigwaitinfo(): as PID 1 in a PID namespace, the
 * kernel drops signals that have neither a handler nor a block, and no handler means no
 * async-signal-safety questions. Build: gcc -static -O2 -o pause pause.c
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

int main(int argc, char **argv) {
    (void)argv;
    if (argc > 1) {
        fputs("pause: sleeps until SIGINT or SIGTERM, reaping children; takes no arguments\n",
              stderr);
        return 2;
    }
    sigset_t waited;
    sigemptyset(&waited);
    sigaddset(&waited, SIGINT);
    sigaddset(&waited, SIGTERM);
    sigaddset(&waited, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &waited, NULL) != 0) {
        perror("pause: sigprocmask");
        return 1;
    }
    for (;;) {
        siginfo_t info;
        int signal_number = sigwaitinfo(&waited, &info);
        if (signal_number == SIGINT || signal_number == SIGTERM) {
            return 0;
        }
        if (signal_number == SIGCHLD) {
            /* One SIGCHLD may stand for several exited children. */
            while (waitpid(-1, NULL, WNOHANG) > 0) {
            }
        }
        /* -1 is EINTR (a stop/continue): wait again. */
    }
}
