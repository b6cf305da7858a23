import Foundation
import Hummingbird
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import SetteeRegistry
import SetteeTLS

/// The cluster's trusted CAs for node-to-node TLS (ADR 0047), Couchbase's routes: `GET /pools/default/trustedCAs`
/// lists them, `POST /node/controller/loadTrustedCAs` adds the certificates the operator placed in the node's
/// `inbox/CA` directory (under its data directory). Both need the full admin (`RBACPolicy`: deny by default).
/// Each certificate is checked here, at the edge (`TrustedCA.parse`: PEM, self-signed, CA basic constraint, valid
/// now, bounded by `Limits`); the load is an operator's change of the cluster document, made on the orchestrator
/// in a claimed epoch and published like users and settings.
enum TrustedCARoutes {
    /// The inbox a node reads CA files from (Couchbase's `inbox/CA`).
    static func inbox(dataDirectory: String) -> String { dataDirectory + "/inbox/CA" }

    static func add(to router: Router<AdminRequestContext>, api: AdminAPI) {
        router.get("/pools/default/trustedCAs") { _, _ in
            AdminResponses.json(.ok, .array(api.registry.trustedCAEntries.map(json)))
        }
        router.post("/node/controller/loadTrustedCAs") { request, _ in await load(request, api: api) }
    }

    static func json(_ entry: TrustedCAEntry) -> JSON {
        .object([
            ("id", .number(Double(entry.id))), ("subject", .string(entry.subject)),
            ("notBefore", .string(entry.notBefore)), ("notAfter", .string(entry.notAfter)),
            ("type", .string("uploaded")), ("pem", .string(entry.pem)),
            ("loadTimestamp", .string(entry.loadTimestamp)), ("loadHost", .string(entry.loadHost)),
            ("loadFile", .string(entry.loadFile)),
        ])
    }

    /// The CA entries of the files in `directory` (names starting with a dot skipped, at most
    /// `Limits.maxTrustedCAFiles` files of `Limits.maxTrustedCAFileBytes`), each certificate checked at `now`.
    /// Throws a message naming the file and the problem; no file, or no certificate, is a problem too.
    static func read(directory: String, host: String, now: Date) throws(TrustedCA.Refusal) -> [TrustedCAEntry] {
        let names: [String]
        do { names = try FileManager.default.contentsOfDirectory(atPath: directory) } catch {
            throw refusal("cannot read \(directory): create it and place the CA's PEM files there")
        }
        let files = names.filter { !$0.hasPrefix(".") }.sorted()
        guard !files.isEmpty else { throw refusal("\(directory) holds no file") }
        guard files.count <= Limits.maxTrustedCAFiles else {
            throw refusal("\(files.count) files in \(directory): at most \(Limits.maxTrustedCAFiles)")
        }
        let stamp = ISO8601DateFormatter().string(from: now)
        var entries: [TrustedCAEntry] = []
        for name in files {
            let path = directory + "/" + name
            let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? nil
            guard let size, size <= Limits.maxTrustedCAFileBytes, let data = FileManager.default.contents(atPath: path)
            else { throw refusal("\(name): unreadable or over \(Limits.maxTrustedCAFileBytes) bytes") }
            let cas: [TrustedCA]
            do { cas = try TrustedCA.parse(pemText: String(decoding: data, as: UTF8.self), now: now) } catch {
                throw refusal("\(name): \(error)")
            }
            let formatter = ISO8601DateFormatter()
            for ca in cas {
                entries.append(
                    TrustedCAEntry(
                        id: 0, pem: ca.pem, subject: ca.subjectText.isEmpty ? "(empty subject)" : ca.subjectText,
                        notBefore: formatter.string(from: ca.notBefore),
                        notAfter: formatter.string(from: ca.notAfter), loadTimestamp: stamp,
                        loadHost: host, loadFile: path))
            }
        }
        return entries
    }

    private static func refusal(_ text: String) -> TrustedCA.Refusal { TrustedCA.Refusal(text) }

    static func load(_ request: Request, api: AdminAPI) async -> Response {
        // The orchestrator makes every change of the cluster document: its inbox is the one read.
        if let forwarded = await api.forwardToOrchestrator(request) { return forwarded }
        let registry = api.registry
        let directory = inbox(dataDirectory: registry.dataDirectory)
        let host = registry.node.host
        let found: Result<[TrustedCAEntry], TrustedCA.Refusal> = await BlockingPool.run {
            do throws(TrustedCA.Refusal) {
                return .success(try Self.read(directory: directory, host: host, now: Date()))
            } catch { return .failure(error) }
        }
        let entries: [TrustedCAEntry]
        switch found {
        case .success(let found): entries = found
        case .failure(let refusal): return AdminResponses.general(.badRequest, "No CA loaded: \(refusal)")
        }
        let added: [TrustedCAEntry]
        do {
            added = try await api.configChange { claim in try registry.addTrustedCAs(entries, claim: claim) }
        } catch let refused as ClusterRequestError {
            return AdminAPI.refusal(refused)
        } catch {
            return AdminResponses.general(.badRequest, "No CA loaded: \(error)")
        }
        if !added.isEmpty { await api.publish() }
        return AdminResponses.json(.ok, .array(added.map(json)))
    }
}
