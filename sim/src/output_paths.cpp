// The files a run's output options write, and the check that no two of them
// are one file: each is opened "wb" on its own, so two names for one file
// (--pcap-file col/x --trace-file col/x, or --pcap-file DIR/report.json with
// --csv DIR) left a mix of both, and the run exited 0.
#include <filesystem>
#include <system_error>

#include "metaroce/sim/output.hpp"

namespace metaroce::sim {

std::string pcap_file_path(const OutputOptions& o) {
  return o.pcap_path.empty() ? "sim.pcap" : o.pcap_path;
}

std::string trace_file_path(const OutputOptions& o) {
  return o.trace_path.empty() ? "trace-flow" + std::to_string(o.trace_flow) + ".csv" : o.trace_path;
}

std::vector<OutputFile> output_files(const OutputOptions& o) {
  std::vector<OutputFile> files;
  if (!o.pcap_link.empty()) files.push_back({"--pcap-file", pcap_file_path(o)});
  if (o.trace_flow >= 0) files.push_back({"--trace-file", trace_file_path(o)});
  if (!o.csv_dir.empty())
    for (const char* f : kCsvDirFiles) files.push_back({"--csv", o.csv_dir + "/" + f});
  return files;
}

namespace {
std::filesystem::path canonical_of(const std::string& path) {
  // Absolute first: weakly_canonical leaves a path none of whose folders
  // exist yet relative ("d/x"), one that starts with "." absolute.
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(path, ec);
  const std::filesystem::path p = std::filesystem::weakly_canonical(abs, ec);
  return ec ? abs.lexically_normal() : p;
}
}  // namespace

std::string output_clash(const OutputOptions& o, const std::vector<OutputFile>& inputs) {
  const std::vector<OutputFile> files = output_files(o);
  std::vector<std::filesystem::path> canon;
  for (const OutputFile& f : files) canon.push_back(canonical_of(f.path));
  for (size_t i = 0; i < files.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (canon[i] == canon[j])
        return files[j].option + " '" + files[j].path + "' and " + files[i].option + " '" +
               files[i].path + "' are the same file";
  for (const OutputFile& in : inputs) {
    const std::filesystem::path read = canonical_of(in.path);
    for (size_t i = 0; i < files.size(); ++i)
      if (canon[i] == read)
        return files[i].option + " '" + files[i].path + "' is " + in.option + " '" + in.path +
               "', which the run reads";
  }
  return {};
}

}  // namespace metaroce::sim
