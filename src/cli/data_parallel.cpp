#include "cli/data_parallel.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"

namespace detllm::cli {
namespace {

std::vector<std::string>& raw_arguments() {
  static std::vector<std::string> args;
  return args;
}

// The router's own options and the data-parallel ones; each takes one value.
const std::set<std::string>& router_options() {
  static const std::set<std::string> names = {
      "--host", "--port", "--api-key", "--data-parallel-size", "--ray-address",
      "--num-cpus-per-replica", "--num-gpus-per-replica"};
  return names;
}

// The serve arguments after `serve`, without the router's and the data-parallel options
// (both `--name value` and `--name=value`).
std::vector<std::string> replica_arguments() {
  const auto& raw = raw_arguments();
  std::vector<std::string> out;
  size_t i = 0;
  while (i < raw.size() && raw[i] != "serve") ++i;
  for (++i; i < raw.size(); ++i) {
    const std::string& a = raw[i];
    const std::string name = a.substr(0, a.find('='));
    if (router_options().count(name) != 0) {
      if (name == a) ++i;  // its value is the next argument
      continue;
    }
    out.push_back(a);
  }
  return out;
}

std::string format_number(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// The binary's folder's sibling python/ (a build tree: build/detllm next to python/detllm).
std::string checkout_python_dir(const std::filesystem::path& self) {
  const auto dir = self.parent_path().parent_path() / "python";
  return std::filesystem::exists(dir / "detllm" / "ray" / "cli.py") ? dir.string() : "";
}

}  // namespace

void add_data_parallel_options(CLI::App& cmd, DataParallelOptions& o) {
  cmd.add_option("--data-parallel-size", o.size,
                 "Serve N replicas of the engine behind one OpenAI endpoint (Ray actors, "
                 "least-loaded routing with prefix affinity, failover that resumes a "
                 "deterministic stream with the same tokens; docs/ray.md). Needs the Python "
                 "package with ray (pip install '.[ray]'); --host/--port/--api-key are the "
                 "router's, every other option goes to each replica")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd.add_option("--ray-address", o.ray_address,
                 "With --data-parallel-size: the Ray cluster to join ('auto': the one `ray start "
                 "--head` runs on this machine); default a local Ray instance");
  cmd.add_option("--num-cpus-per-replica", o.cpus_per_replica,
                 "With --data-parallel-size: CPU cores Ray reserves for each replica")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--num-gpus-per-replica", o.gpus_per_replica,
                 "With --data-parallel-size: GPUs Ray reserves for each replica (1 with "
                 "--backend cuda)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

void set_raw_arguments(int argc, char** argv) {
  raw_arguments().assign(argv, argv + argc);
}

std::vector<std::string> data_parallel_command(const DataParallelOptions& o,
                                               const std::vector<std::string>& serve_args,
                                               const std::string& self_binary,
                                               const std::string& python) {
  std::vector<std::string> cmd = {python, "-m", "detllm.ray", "serve", "--data-parallel",
                                  std::to_string(o.size), "--binary", self_binary,
                                  "--num-cpus-per-replica", format_number(o.cpus_per_replica),
                                  "--num-gpus-per-replica", format_number(o.gpus_per_replica)};
  if (!o.ray_address.empty()) {
    cmd.push_back("--address");
    cmd.push_back(o.ray_address);
  }
  // The router's options: the values as given on the serve command line.
  const auto& raw = raw_arguments();
  for (size_t i = 0; i < raw.size(); ++i) {
    for (const char* name : {"--host", "--port", "--api-key"}) {
      const std::string prefix = std::string(name) + "=";
      if (raw[i] == name && i + 1 < raw.size()) {
        cmd.push_back(name);
        cmd.push_back(raw[i + 1]);
      } else if (raw[i].rfind(prefix, 0) == 0) {
        cmd.push_back(raw[i]);
      }
    }
  }
  cmd.push_back("--");
  cmd.insert(cmd.end(), serve_args.begin(), serve_args.end());
  return cmd;
}

void run_data_parallel(const DataParallelOptions& o) {
  const std::filesystem::path self = std::filesystem::canonical("/proc/self/exe");
  std::string python = "python3";
  if (const char* p = std::getenv("DETLLM_PYTHON"); p != nullptr && *p != '\0') {
    python = p;
  } else if (auto venv = self.parent_path().parent_path() / ".venv" / "bin" / "python";
             std::filesystem::exists(venv)) {
    python = venv.string();  // the checkout's project venv (scripts/setup.sh makes it)
  }
  if (const std::string dir = checkout_python_dir(self); !dir.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    const std::string path = old != nullptr && *old != '\0' ? dir + ":" + old : dir;
    setenv("PYTHONPATH", path.c_str(), 1);
  }
  const auto cmd = data_parallel_command(o, replica_arguments(), self.string(), python);
  std::vector<char*> argv;
  for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fprintf(stderr, "detllm serve: %d replicas on Ray: %s -m detllm.ray serve ...\n", o.size,
               python.c_str());
  std::fflush(stderr);
  execvp(argv[0], argv.data());
  throw_error("--data-parallel-size: could not start {} ({}); set DETLLM_PYTHON to a Python that has "
       "the detllm package and ray (pip install '.[ray]')",
       python, std::strerror(errno));
}

}  // namespace detllm::cli
