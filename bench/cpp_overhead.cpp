// cpp_overhead: what the C++ SDK (include/datasystem/, libdatasystem_cpp)
// costs over the C API it wraps. One process, one worker, the same library
// underneath: a 1 KiB and a 1 MiB set+get through KVClient::Set and
// KVClient::Get(key, std::string &) against ds_kv_set and ds_kv_get (+ds_free),
// in interleaved rounds (the order alternating) so that drift in the machine
// hits both alike. Prints p50 and mean per set+get and the C++/C ratios
// (target: within 1.05x); --json FILE writes them too. A benchmark: the
// ratios are reported, never asserted.
//
//   cpp_overhead [--worker_address HOST:PORT] [--quick] [--json FILE]
// Without --worker_address it starts a worker from DS_BUILD_DIR (default: the
// build directory this program sits in).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "datasystem/kv_client.h"
#include "ds/kv_client.h"
#include "tests/cpp/cpp_worker.h"

namespace
{

uint64_t NowNs()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

void Die(const char *what, const std::string &why)
{
    fprintf(stderr, "cpp_overhead: %s: %s\n", what, why.c_str());
    exit(1);
}

struct Lat {
    double p50_us;
    double mean_us;
};

Lat Summarize(std::vector<uint64_t> &ns)
{
    std::sort(ns.begin(), ns.end());
    double sum = 0;
    for (uint64_t v : ns)
        sum += static_cast<double>(v);
    return {ns[ns.size() / 2] / 1e3, sum / ns.size() / 1e3};
}

void RunC(ds_client_t *c, const std::string &key, const std::string &val, int n,
          std::vector<uint64_t> &out)
{
    for (int i = 0; i < n; i++) {
        uint64_t t0 = NowNs();
        if (ds_kv_set(c, key.c_str(), val.data(), val.size(), nullptr) != DS_K_OK)
            Die("ds_kv_set", ds_last_error());
        void *v = nullptr;
        size_t len = 0;
        if (ds_kv_get(c, key.c_str(), 0, &v, &len) != DS_K_OK || len != val.size())
            Die("ds_kv_get", ds_last_error());
        ds_free(v);
        out.push_back(NowNs() - t0);
    }
}

void RunCpp(datasystem::KVClient &kv, const std::string &key, const std::string &val, int n,
            std::vector<uint64_t> &out)
{
    for (int i = 0; i < n; i++) {
        uint64_t t0 = NowNs();
        datasystem::Status st = kv.Set(key, val);
        if (st.IsError()) Die("KVClient::Set", st.ToString());
        std::string got; // a new value each time, as ds_kv_get allocates one
        st = kv.Get(key, got);
        if (st.IsError() || got.size() != val.size()) Die("KVClient::Get", st.ToString());
        out.push_back(NowNs() - t0);
    }
}

} // namespace

int main(int argc, char **argv)
{
    std::string addr, json;
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--worker_address" && i + 1 < argc)
            addr = argv[++i];
        else if (a == "--json" && i + 1 < argc)
            json = argv[++i];
        else if (a == "--quick")
            quick = true;
        else {
            fprintf(stderr,
                    "usage: cpp_overhead [--worker_address HOST:PORT] [--quick] [--json FILE]\n");
            return 2;
        }
    }
    TestWorker worker;
    std::string host = "127.0.0.1";
    int port = 0;
    if (addr.empty()) {
        std::string build;
        if (const char *b = getenv("DS_BUILD_DIR")) {
            build = b;
        } else {
            char self[4096];
            ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
            if (n <= 0) Die("locating the build", "set DS_BUILD_DIR");
            self[n] = '\0';
            build = std::string(self).substr(0, std::string(self).rfind('/')) + "/..";
        }
        if (!worker.Start(build + "/src/worker/datasystem_worker", 1024)) return 1;
        port = worker.Port();
    } else {
        size_t colon = addr.rfind(':');
        if (colon == std::string::npos)
            Die("--worker_address", "want HOST:PORT, got '" + addr + "'");
        host = addr.substr(0, colon);
        port = atoi(addr.c_str() + colon + 1);
    }

    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = host.c_str();
    o.port = port;
    ds_client_t *c = nullptr;
    if (ds_client_connect(&o, &c) != DS_K_OK) Die("ds_client_connect", ds_last_error());
    datasystem::ConnectOptions co;
    co.host = host;
    co.port = port;
    datasystem::KVClient kv(co);
    datasystem::Status st = kv.Init();
    if (st.IsError()) Die("KVClient::Init", st.ToString());

    struct Case {
        size_t size;
        const char *name;
        int perRound;
    };
    const Case cases[] = {{1024, "1KiB", quick ? 300 : 1000}, {1 << 20, "1MiB", quick ? 10 : 30}};
    const int rounds = quick ? 6 : 31;
    std::string out = "{\n  \"transport\": \"" +
                      std::string(ds_client_is_local(c) ? "local" : "tcp") + "\",\n  \"rows\": [";
    printf("%-6s %-4s %10s %10s\n", "size", "api", "p50_us", "mean_us");
    bool first = true;
    for (const Case &k : cases) {
        std::string val(k.size, 'v');
        std::string keyC = std::string("cpp_overhead.c.") + k.name,
                    keyCpp = std::string("cpp_overhead.cpp.") + k.name;
        std::vector<uint64_t> nsC, nsCpp, warm;
        RunC(c, keyC, val, k.perRound / 4 + 1, warm); // warm-up, not counted
        RunCpp(kv, keyCpp, val, k.perRound / 4 + 1, warm);
        std::vector<double> roundRatios;
        for (int r = 0; r < rounds; r++) {
            std::vector<uint64_t> rc, rp;
            if (r % 2 == 0) {
                RunC(c, keyC, val, k.perRound, rc);
                RunCpp(kv, keyCpp, val, k.perRound, rp);
            } else {
                RunCpp(kv, keyCpp, val, k.perRound, rp);
                RunC(c, keyC, val, k.perRound, rc);
            }
            nsC.insert(nsC.end(), rc.begin(), rc.end());
            nsCpp.insert(nsCpp.end(), rp.begin(), rp.end());
            roundRatios.push_back(Summarize(rp).p50_us / Summarize(rc).p50_us);
        }
        // Each round's p50 ratio: the two sides of a round ran back to back,
        // so their median is the least disturbed by load from elsewhere.
        std::sort(roundRatios.begin(), roundRatios.end());
        double roundRatio = roundRatios[roundRatios.size() / 2];
        Lat lc = Summarize(nsC), lp = Summarize(nsCpp);
        printf("%-6s %-4s %10.2f %10.2f\n", k.name, "C", lc.p50_us, lc.mean_us);
        printf("%-6s %-4s %10.2f %10.2f\n", k.name, "C++", lp.p50_us, lp.mean_us);
        printf("%-6s ratio C++/C: p50 %.3f, mean %.3f, median of the rounds' p50 ratios %.3f "
               "(target <= 1.05)\n",
               k.name, lp.p50_us / lc.p50_us, lp.mean_us / lc.mean_us, roundRatio);
        char row[512];
        snprintf(row, sizeof(row),
                 "%s\n    {\"size\": %zu, \"c_p50_us\": %.2f, \"c_mean_us\": %.2f, "
                 "\"cpp_p50_us\": %.2f, \"cpp_mean_us\": %.2f, \"ratio_p50\": %.3f, "
                 "\"ratio_mean\": %.3f, \"ratio_round_p50\": %.3f, \"ops\": %zu}",
                 first ? "" : ",", k.size, lc.p50_us, lc.mean_us, lp.p50_us, lp.mean_us,
                 lp.p50_us / lc.p50_us, lp.mean_us / lc.mean_us, roundRatio, nsC.size());
        out += row;
        first = false;
    }
    out += "\n  ]\n}\n";
    kv.ShutDown();
    ds_client_close(c);
    if (!json.empty()) {
        FILE *f = fopen(json.c_str(), "w");
        if (f == nullptr || fputs(out.c_str(), f) < 0 || fclose(f) != 0) Die("writing", json);
    }
    return 0;
}
