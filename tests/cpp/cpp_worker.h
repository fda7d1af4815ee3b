// A worker process for the C++ tests and bench: started on a free loopback
// port with a private socket directory (DS_UNIX_SOCKET_DIR, which the
// clients of this process read too), stopped by PID. The worker also dies
// with this process (PR_SET_PDEATHSIG).
#ifndef DS_TESTS_CPP_WORKER_H
#define DS_TESTS_CPP_WORKER_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

class TestWorker
{
  public:
    // bin: the datasystem_worker binary. False (message on stderr) on failure.
    bool Start(const std::string &bin, int arenaMb)
    {
        char dir[] = "/tmp/ds-cpp-XXXXXX";
        if (mkdtemp(dir) == nullptr) return false;
        dir_ = dir;
        setenv("DS_UNIX_SOCKET_DIR", dir_.c_str(), 1);
        port_ = FreePort();
        std::string addr = "127.0.0.1:" + std::to_string(port_);
        std::string mb = std::to_string(arenaMb);
        std::string log = dir_ + "/worker.log";
        pid_ = fork();
        if (pid_ < 0) return false;
        if (pid_ == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (freopen(log.c_str(), "w", stdout) == nullptr ||
                freopen(log.c_str(), "a", stderr) == nullptr)
                _exit(127);
            execl(bin.c_str(), bin.c_str(), "--worker_address", addr.c_str(),
                  "--shared_memory_size_mb", mb.c_str(), static_cast<char *>(nullptr));
            _exit(127);
        }
        std::string sock = dir_ + "/worker-127.0.0.1-" + std::to_string(port_) + ".sock";
        for (int i = 0; i < 400; i++) { // 20 s
            struct stat st;
            if (stat(sock.c_str(), &st) == 0 && TcpUp()) return true;
            if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
                pid_ = 0;
                break;
            }
            usleep(50000);
        }
        fprintf(stderr, "the worker %s did not start; log in %s\n", bin.c_str(), log.c_str());
        return false;
    }
    ~TestWorker()
    {
        if (pid_ > 0) {
            kill(pid_, SIGTERM);
            waitpid(pid_, nullptr, 0);
        }
        if (!dir_.empty()) {
            std::string cmd = "rm -rf '" + dir_ + "'";
            if (system(cmd.c_str()) != 0) fprintf(stderr, "could not remove %s\n", dir_.c_str());
        }
    }
    int Port() const
    {
        return port_;
    }

  private:
    // The worker listens on TCP too (the socket file may come first).
    bool TcpUp() const
    {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<uint16_t>(port_));
        bool up = connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0;
        close(fd);
        return up;
    }
    static int FreePort()
    {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof(a);
        int port = 0;
        if (bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
            port = ntohs(a.sin_port);
        close(fd);
        return port;
    }
    pid_t pid_ = 0;
    int port_ = 0;
    std::string dir_;
};

#endif
