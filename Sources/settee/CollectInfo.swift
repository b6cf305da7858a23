import ArgumentParser
import Foundation
import SetteeClient
import SetteeCore
import SetteeJSON

/// `settee collect-info --output FILE`: what Couchbase's `cbcollect_info` gives a support engineer, for the whole
/// cluster (ADR 0148). Starts `POST /controller/startLogsCollection` (every node, `--redact partial` hashes user
/// data), polls the `clusterLogsCollection` task of `GET /pools/default/tasks` until it ends, then downloads the
/// archive (`GET /collectInfo/NAME`) to `--output`; when it cannot (too large for the client), it prints where the
/// archive lies on the orchestrator.
struct CollectInfo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "collect-info",
        abstract: "Gather every node's logs, audit log, stats and cluster document into one .tar.gz archive.")
    @OptionGroup var global: GlobalOptions
    @Option(help: "Where to write the archive (.tar.gz).") var output: String
    @Option(help: "User data in the archive: none, or partial (each <ud> value replaced by a salted SHA-1).")
    var redact = "none"
    @Option(help: "Seconds to wait for the collection.") var timeout = 300

    func run() async throws {
        guard redact == "none" || redact == "partial" else { throw ValidationError("--redact must be none or partial") }
        try await global.call(
            .POST, "/controller/startLogsCollection", form: [("nodes", "*"), ("logRedactionLevel", redact)])
        let deadline = ContinuousClock.now + .seconds(timeout)
        var task: JSON? = nil
        while ContinuousClock.now < deadline {
            let tasks = try await global.json("/pools/default/tasks")
            task = tasks.arrayValue?.first { $0["type"]?.stringValue == "clusterLogsCollection" }
            let status = task?["status"]?.stringValue ?? "none"
            if status == "completed" || status == "cancelled" { break }
            print("collecting: \(task?["progress"]?.intValue ?? 0)%")
            try await Task.sleep(for: .seconds(1))
        }
        guard let task, let status = task["status"]?.stringValue, status != "running" else {
            throw CLIError("the logs collection did not end within \(timeout) s")
        }
        for (node, entry) in task["perNode"]?.objectValue ?? [] where entry["status"]?.stringValue != "collected" {
            print("node \(node): \(entry["status"]?.stringValue ?? "?") \(entry["error"]?.stringValue ?? "")")
        }
        guard let name = task["name"]?.stringValue, let path = task["path"]?.stringValue else {
            throw CLIError("the collection wrote no archive (status \(status))")
        }
        let reply: HTTPResponse
        do { reply = try await global.http(.GET, "/collectInfo/" + name) } catch {
            print(
                "archive on the orchestrator (\(task["node"]?.stringValue ?? "?")): \(path) (not downloaded: \(error))")
            return
        }
        guard reply.status == 200 else {
            print("archive on the orchestrator (\(task["node"]?.stringValue ?? "?")): \(path) (HTTP \(reply.status))")
            return
        }
        guard FileManager.default.createFile(atPath: output, contents: Data(reply.body)) else {
            throw CLIError("cannot write \(output)")
        }
        print("wrote \(output) (\(reply.body.count) bytes; \(status))")
    }
}
