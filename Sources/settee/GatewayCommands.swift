import ArgumentParser
import SetteeClient
import SetteeClusterMap
import SetteeJSON

#if canImport(Glibc)
    import Glibc
#endif

/// `settee gateway`: commands against a `settee-gateway`'s admin port (Sync Gateway's REST shapes).
struct GatewayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gateway", abstract: "Sync gateway databases.", subcommands: [Stats.self])

    /// `settee gateway stats DB`: the database's bounded-metadata figures (issue 71 item 7; ADRs 0145, 0151, 0156),
    /// one `name value` line each, read from the admin port's `/_expvar` (`syncgateway.per_db.DB.database`):
    /// documents, tombstones, stored and live revisions, channel-history entries, old bodies and their bytes,
    /// sessions, checkpoints, attachment blobs and bytes, and the counters of what was purged, pruned and expired.
    struct Stats: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "A gateway database's metadata figures (documents, revisions, history, bodies, sessions…).")
        @Argument(help: "Database name.") var database: String
        @Option(help: "Admin URL of the gateway (env SETTEE_GATEWAY; default http://127.0.0.1:4985).")
        var gateway: String?
        @Option(name: [.customShort("u"), .long], help: "Admin user, when the admin port asks for one.")
        var username: String?
        @Option(name: [.customShort("p"), .long], help: "Its password.")
        var password: String?
        @Flag(help: "Print the figures as one JSON object.") var json = false

        func run() async throws {
            let url = gateway ?? Self.env("SETTEE_GATEWAY") ?? "http://127.0.0.1:4985"
            let seed = url.contains("://") ? url : "http://" + url
            guard case .http(let address)? = Seed(seed), seed.hasPrefix("http://") else {
                throw ValidationError("--gateway must be http://HOST:PORT, got \(url)")
            }
            let r = try await AdminHTTP.request(
                .GET, "/_expvar", at: address, username: username, password: password)
            guard (200..<300).contains(r.status) else {
                throw CLIError(GlobalOptions.explain(r, method: .GET, path: "/_expvar", user: username ?? "(none)"))
            }
            let expvar: JSON
            do { expvar = try JSON.parse(r.body) } catch { throw CLIError("/_expvar: \(error)") }
            guard let figures = Self.figures(expvar, database: database) else {
                throw CLIError("no database \(database) on \(url)")
            }
            if json {
                print(String(decoding: JSON.object(figures).serialized(), as: UTF8.self))
                return
            }
            let width = figures.map(\.0.count).max() ?? 0
            print("gateway database \(database)")
            for (name, value) in figures {
                let text = value.intValue.map(String.init) ?? String(decoding: value.serialized(), as: UTF8.self)
                print("  " + name + String(repeating: " ", count: width - name.count) + "  " + text)
            }
        }

        /// `syncgateway.per_db.<database>.database` of an `/_expvar` answer; nil when the database is absent.
        static func figures(_ expvar: JSON, database: String) -> [(String, JSON)]? {
            expvar["syncgateway"]?["per_db"]?[database]?["database"]?.objectValue
        }

        static func env(_ name: String) -> String? {
            guard let v = getenv(name) else { return nil }
            let s = String(cString: v)
            return s.isEmpty ? nil : s
        }
    }
}
