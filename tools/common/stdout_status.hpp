// The exit status of a tool whose report goes to stdout: a report that did
// not reach it (a full disk, /dev/full, a file system gone read-only) is a
// failed run. The tools used to exit 0 with the file empty or cut short, and
// a script that checks the status kept it as a result.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace metaroce::tools {

// rc when stdout took everything written to it; otherwise says so on stderr,
// naming `tool`, and returns `failed` (rc if that is already a failure).
[[nodiscard]] inline int stdout_status(int rc, const char* tool, int failed) {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && std::ferror(stdout) == 0 && std::cout.good()) return rc;
  std::fprintf(stderr, "%s: the report could not be written to stdout%s%s\n", tool,
               err != 0 ? ": " : "", err != 0 ? std::strerror(err) : "");
  return rc != 0 ? rc : failed;
}

}  // namespace metaroce::tools
