// detllm command-line entry point (placeholder until the generate command lands).
#include <cstdio>

int main() {
  std::puts("detllm: commands coming soon");
  return 0;
}
