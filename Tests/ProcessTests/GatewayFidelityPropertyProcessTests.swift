import Foundation
import NIOHTTP1
import SetteeClient
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeReplication
import SetteeSubdoc
import SetteeTestSupport
import Testing

/// The whole kind of issue 67 as one seeded property: random documents written through every entry point a client
/// has (REST `PUT`, `_bulk_docs` in both modes, KV SET and a sub-document mutation through the smart client, a Lite
/// push) are read back through every reader (REST `GET`, `_changes` + `_bulk_get`, KV get and lookup_in, a Lite pull
/// with the replicator that follows PouchDB's algorithm). Each reader sees exactly what was written, or the write was
/// refused (a 4xx to the writer, or for a KV write a refused import, counted in `import_error_count` and logged) and
/// left nothing altered; no replication fails a document or stops because of another document.
@Suite("Gateway fidelity property (real processes)", .serialized, .onTestThreads)
struct GatewayFidelityPropertyProcessTests {
    enum EntryPoint: String, CaseIterable, Sendable {
        case restPut, bulkDocs, bulkDocsReplicated, kvSet, kvSubdoc, litePush
        var isKV: Bool { self == .kvSet || self == .kvSubdoc }
    }

    /// One generated document and what must become of it.
    struct Written {
        var id: String
        var via: EntryPoint
        /// The document's members as JSON texts, in order (reserved ones included when generated).
        var members: [(String, String)]
        /// Nesting depth of the document, its own object counting 1.
        var depth: Int
        /// It holds a member starting with `_` (only generated for the KV entry points and as `_foo` over REST).
        var reserved: Bool
        /// It holds a number no JSON reader here can represent (`1e400`).
        var unreadableNumber: Bool
        var ttl: Bool
        var xattr: Bool
        /// The sub-document mutation's member (`kvSubdoc`).
        var subdoc: (String, String)?

        var text: String { "{" + members.map { "\(Self.quote($0.0)):\($0.1)" }.joined(separator: ",") + "}" }
        /// What the application's document is once every write landed (the sub-document member added).
        var finalText: String {
            guard let subdoc else { return text }
            return "{" + (members + [subdoc]).map { "\(Self.quote($0.0)):\($0.1)" }.joined(separator: ",") + "}"
        }
        var refused: Bool { depth > Limits.maxDocumentDepth || reserved || unreadableNumber }

        static func quote(_ s: String) -> String { JSON.string(s).text }
    }

    /// A seeded generator of JSON texts with the shapes that broke fidelity before: deep nesting around the document
    /// bound, unicode keys and values (escapes, surrogate pairs, combining marks), integers at the 64-bit edges and
    /// beyond, doubles at the edges of their range, reserved members, ids near the key-length bound, big strings.
    struct Generator {
        var rng: SplitMix64

        static let numbers = [
            "0", "-0", "1", "-1", "42", "9223372036854775807", "-9223372036854775808", "18446744073709551615",
            "123456789012345678901234567890", "0.1", "1e300", "-1.5E-300", "5e-324", "1.7976931348623157e308",
            "1E2", "3.14159265358979323846264338327950288", "-0.0", "2.5e-7",
        ]
        static let strings = [
            "", "plain", "é", "日本語", "🎉", "👩‍👩‍👧", #"quote \" backslash \\"#, #"nul \u0000 and bell \u0007"#,
            #"tab\tnew\nline"#, #"\ud83d\ude00 escaped pair"#, "combining e\u{301}", #"\u2028\u2029"#, "Ω≈ç√∫",
            String(repeating: "long ", count: 40),
        ]
        static let keys = ["k", "ключ", "キー", "🔑", "a b", #"q\"k"#, "über", "x.y", "[0]", "$", "e\u{301}"]

        mutating func int(_ r: ClosedRange<Int>) -> Int { Int.random(in: r, using: &rng) }
        mutating func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &rng) < p }
        mutating func pick<T>(_ items: [T]) -> T { items[int(0...(items.count - 1))] }

        /// A JSON text nesting at most `levels` deep (scalars are 0 deep) and that depth.
        mutating func value(levels: Int) -> (String, Int) {
            let kind = levels == 0 ? int(0...3) : int(0...5)
            switch kind {
            case 0: return (pick(Self.numbers), 0)
            case 1: return (Written.quote(pick(Self.strings)), 0)
            case 2: return (pick(["true", "false", "null"]), 0)
            case 3: return (Written.quote(String(int(0...999_999))), 0)
            case 4:
                var items: [String] = []
                var depth = 0
                for _ in 0..<int(0...4) {
                    let (t, d) = value(levels: levels - 1)
                    items.append(t)
                    depth = max(depth, d)
                }
                return ("[" + items.joined(separator: ",") + "]", depth + 1)
            default:
                var members: [String] = []
                var depth = 0
                for n in 0..<int(0...4) {
                    let (t, d) = value(levels: levels - 1)
                    members.append("\(Written.quote(pick(Self.keys) + String(n))):\(t)")
                    depth = max(depth, d)
                }
                return ("{" + members.joined(separator: ",") + "}", depth + 1)
            }
        }

        mutating func document(_ n: Int, via: EntryPoint) -> Written {
            // Ids of every shape a key may have, some near the key-length bound.
            var id = "doc-\(n)-\(pick(["a", "ü", "日本", "x y", "a+b", "p%q", "🎉"]))"
            if chance(0.1) { id += String(repeating: "i", count: Limits.maxKeyLength - id.utf8.count - int(0...2)) }
            var members: [(String, String)] = []
            var depth = 1
            for m in 0..<int(1...6) {
                let (t, d) = value(levels: 3)
                members.append((pick(Self.keys) + "-\(m)", t))
                depth = max(depth, d + 1)
            }
            // Deep chains around the document bound.
            if chance(0.25) {
                let bound = Limits.maxDocumentDepth
                let chain = pick([50, 127, 128, 129, 136, 137, 300, bound - 2, bound - 1, bound, bound + 1, bound + 40])
                members.append(
                    ("deep", String(repeating: "[", count: chain) + "1" + String(repeating: "]", count: chain)))
                depth = max(depth, chain + 1)
            }
            if chance(0.05) { members.append(("big", Written.quote(String(repeating: "b", count: 200_000)))) }
            var unreadable = false
            if chance(0.04) {
                members.append(("huge", "1e400"))
                unreadable = true
            }
            var reserved = false
            if via.isKV && chance(0.2) {
                let name = pick(["_id", "_rev", "_deleted", "_attachments", "_revisions", "_exp", "_sync", "_foo"])
                let value = name == "_deleted" ? "true" : (name == "_id" ? #""another""# : #"{"x":1}"#)
                members.insert((name, value), at: int(0...members.count))
                reserved = true
            } else if !via.isKV && via != .litePush && chance(0.1) {
                members.append(("_foo", "1"))
                reserved = true
            }
            let kv = via.isKV
            let subdoc: (String, String)? = via == .kvSubdoc ? ("sub", value(levels: 2).0) : nil
            if let subdoc, subdoc.1.hasPrefix("[") || subdoc.1.hasPrefix("{") {
                depth = max(depth, 2)
            }
            return Written(
                id: id, via: via, members: members, depth: depth, reserved: reserved, unreadableNumber: unreadable,
                ttl: kv && chance(0.4), xattr: kv && chance(0.4), subdoc: subdoc)
        }
    }

    /// A JSON value with every object's members sorted by name (so a sub-document's added member, placed last by
    /// the data node, compares equal wherever a writer put it).
    static func sorted(_ j: JSON) -> JSON {
        switch j {
        case .object(let members): return .object(members.sorted { $0.0 < $1.0 }.map { ($0.0, sorted($0.1)) })
        case .array(let items): return .array(items.map(sorted))
        default: return j
        }
    }

    /// The application's members of a body a reader got (CouchDB's `_id`, `_rev`, `_revisions` left out).
    static func application(_ body: JSON?) -> JSON? {
        guard case .object(let members)? = body else { return nil }
        return sorted(.object(members.filter { !["_id", "_rev", "_revisions"].contains($0.0) }))
    }

    @Test("what any client writes is what every client reads", arguments: [true, false])
    func everyWriterEveryReader(shared: Bool) async throws {
        let seed =
            ProcessInfo.processInfo.environment["SETTEE_SEED"].flatMap { UInt64($0) }
            ?? UInt64.random(in: 1...9_999_999)
        print("GatewayFidelityPropertyProcessTests seed \(seed) shared=\(shared) (SETTEE_SEED=\(seed) replays it)")
        var gen = Generator(rng: SplitMix64(seed: seed))
        let s = try await GatewayImportFidelityProcessTests.Setup.start("gw-fid-prop-\(shared)", shared: shared)
        defer { s.stop() }
        let dbURL = "\(s.admin)/demo"
        let count = ProcessInfo.processInfo.environment["SETTEE_FIDELITY_DOCS"].flatMap { Int($0) } ?? 72
        var written: [Written] = []
        for n in 0..<count { written.append(gen.document(n, via: EntryPoint.allCases[n % EntryPoint.allCases.count])) }
        var problems: [String] = []

        // --- Writers.
        var bulk: [Written] = []
        var replicated: [Written] = []
        var lite: [Written] = []
        for (index, w) in written.enumerated() {
            let escaped = PercentEncoding.encode(w.id)
            switch w.via {
            case .restPut:
                let r = try await GatewayHTTP.request(.PUT, "\(dbURL)/\(escaped)", body: Array(w.text.utf8))
                if w.refused ? !(400..<500).contains(r.status) : r.status != 201 {
                    problems.append("PUT \(w.id) depth \(w.depth): \(r.status) \(r.text.prefix(200))")
                }
            case .bulkDocs: bulk.append(w)
            case .bulkDocsReplicated: replicated.append(w)
            case .litePush: lite.append(w)
            case .kvSet, .kvSubdoc:
                _ = try await s.client.upsert(
                    w.id, Array(w.text.utf8), flags: 0x0200_0006, expiry: w.ttl ? 3600 : 0, datatype: 1)
                guard w.xattr || w.subdoc != nil else { continue }
                var specs: [SubdocSpec] = []
                if w.xattr {
                    specs.append(
                        SubdocSpec(
                            operation: .command(.dictUpsert), flags: [.xattrPath, .mkdirP], path: Array("app".utf8),
                            value: Array(#"{"by":"sdk"}"#.utf8)))
                }
                if let (k, v) = w.subdoc {
                    specs.append(
                        SubdocSpec(operation: .command(.dictUpsert), path: Array(k.utf8), value: Array(v.utf8)))
                }
                var request = SubdocRequest.multiMutation(specs)
                request.preserveExpiry = true
                do { _ = try await s.client.mutateIn(w.id, request) } catch {
                    // A body nested past the data node's sub-document bound cannot be edited (kv_engine answers
                    // SUBDOC_DOC_E2DEEP): it stays as set, which is what every reader must then see.
                    guard w.depth > Limits.subdocMaxDocumentDepth else {
                        problems.append("mutateIn \(w.id) depth \(w.depth): \(error)")
                        continue
                    }
                    written[index].subdoc = nil
                    written[index].xattr = false
                }
            }
        }
        for (batch, newEdits) in [(bulk, true), (replicated, false)] where !batch.isEmpty {
            var texts: [String] = []
            for w in batch {
                var head = #""_id":\#(Written.quote(w.id))"#
                if !newEdits {
                    let digest = String(
                        w.id.utf8.reduce(UInt64(14_695_981_039_346_656_037)) { ($0 ^ UInt64($1)) &* 1_099_511_628_211 },
                        radix: 16)
                    head += #","_revisions":{"start":1,"ids":["\#(digest)"]}"#
                }
                let inner = w.text.dropFirst().dropLast()
                texts.append("{" + head + (inner.isEmpty ? "" : "," + inner) + "}")
            }
            let body = #"{"new_edits":\#(newEdits),"docs":[\#(texts.joined(separator: ","))]}"#
            let r = try await GatewayHTTP.request(.POST, "\(dbURL)/_bulk_docs", body: Array(body.utf8))
            let rows = (try? JSON.parse(r.body).arrayValue) ?? nil
            guard r.status == 201, let rows, rows.count == batch.count else {
                problems.append("_bulk_docs new_edits=\(newEdits): \(r.status) \(r.text.prefix(300))")
                continue
            }
            for (w, row) in zip(batch, rows) where (row["error"] != nil) != w.refused {
                problems.append("_bulk_docs new_edits=\(newEdits) \(w.id) depth \(w.depth): \(row)")
            }
        }
        let dir = URL(fileURLWithPath: TemporaryDirectory.make("fidprop"))
        defer { try? FileManager.default.removeItem(at: dir) }
        let phone = try Database(name: "phone", directory: dir.path)
        defer { phone.close() }
        for w in lite {
            // What a Lite app can hold: a text our parser reads (it refuses `1e400` and nesting past its bound).
            guard let parsed = try? JSON.parse(w.text, maxDepth: Limits.maxJSONDepth) else {
                if !w.refused { problems.append("Lite could not read \(w.id)") }
                continue
            }
            do {
                _ = try phone.save(Document(id: w.id, properties: parsed))
                if w.refused { problems.append("Lite saved \(w.id) of depth \(w.depth)") }
            } catch {
                if !w.refused { problems.append("Lite refused \(w.id) depth \(w.depth): \(error)") }
            }
        }
        let push = await LiteConvergence.replicate(
            LocalEndpoint(phone, feedTimeoutMs: 1000),
            try RemoteEndpoint(url: dbURL, logger: LiteConvergence.quietLogger))
        if push.lastError != nil || push.docWriteFailures > 0 { problems.append("Lite push: \(push)") }

        // --- Every accepted document reaches the feed; every refused KV write is counted.
        let accepted = written.filter { !$0.refused }
        let refusedKV = written.filter { $0.refused && $0.via.isKV }
        let acceptedIDs = Set(accepted.map(\.id))
        var feed: [JSON] = []
        let reached = await GatewaySharedBucketProcessTests.eventually(60) {
            let r = try await GatewayHTTP.request(.GET, "\(dbURL)/_changes", headers: [("Accept", "application/json")])
            feed = (try JSON.parse(r.body)["results"]?.arrayValue ?? []).filter {
                $0["id"]?.stringValue?.hasPrefix("_user/") == false
            }
            let expvar = try JSON.parse(try await GatewayHTTP.request(.GET, "\(s.admin)/_expvar").body)
            let errors = expvar["syncgateway"]?["per_db"]?["demo"]?["shared_bucket_import"]?["import_error_count"]
            return Set(feed.compactMap { $0["id"]?.stringValue }) == acceptedIDs
                && (errors?.intValue ?? 0) >= refusedKV.count
        }
        let listed = Set(feed.compactMap { $0["id"]?.stringValue })
        #expect(
            reached,
            "missing from _changes: \(acceptedIDs.subtracting(listed)); extra: \(listed.subtracting(acceptedIDs))")

        // --- Readers.
        let expected = Dictionary(
            uniqueKeysWithValues: accepted.map { w in (w.id, (try? JSON.parse(w.finalText)).map(Self.sorted)) })
        for w in written {
            let r = try await GatewayHTTP.request(
                .GET, "\(dbURL)/\(PercentEncoding.encode(w.id))", headers: [("Accept", "application/json")])
            if w.refused {
                if r.status != 404 { problems.append("GET refused \(w.id) (\(w.via)): \(r.status)") }
            } else if r.status != 200 || Self.application(try? JSON.parse(r.body)) != expected[w.id] ?? nil {
                problems.append("GET \(w.id) (\(w.via)) depth \(w.depth): \(r.status) \(r.text.prefix(200))")
            }
            // KV readers: an application's own write keeps its bytes, refused or not (with shared access; the 1.x
            // layout adds `_sync` to the body by design); its TTL and user XATTR survive the import.
            if w.via.isKV {
                guard let item = try? await s.client.get(w.id) else {
                    problems.append("KV get \(w.id): the application's item is gone")
                    continue
                }
                if shared || w.refused {
                    let same =
                        w.subdoc == nil
                        ? item.value == Array(w.text.utf8)
                        : (try? JSON.parse(item.value)).map(Self.sorted)
                            == (try? JSON.parse(w.finalText)).map(Self.sorted)
                    if !same {
                        problems.append("KV get \(w.id): \(String(decoding: item.value.prefix(200), as: UTF8.self))")
                    }
                }
                let look = try await s.client.lookupIn(
                    w.id,
                    .multiLookup([
                        SubdocSpec(operation: .command(.get), flags: .xattrPath, path: Array("$document".utf8)),
                        SubdocSpec(operation: .command(.get), flags: .xattrPath, path: Array("app".utf8)),
                    ]))
                let meta = look.flatMap { try? JSON.parse($0.results[0].value) }
                if w.ttl && (meta?["exptime"]?.intValue ?? 0) == 0 { problems.append("TTL of \(w.id) lost") }
                if w.xattr && look?.results[1].status != 0 { problems.append("user XATTR of \(w.id) lost") }
            } else if !w.refused, shared {
                let item = try? await s.client.get(w.id)
                if (item.flatMap { try? JSON.parse($0.value) }).map(Self.sorted) != expected[w.id] ?? nil {
                    problems.append(
                        "KV get of gateway-written \(w.id): \(String(decoding: item?.value.prefix(200) ?? [], as: UTF8.self))"
                    )
                }
            }
        }
        // `_changes` + `_bulk_get` with `latest`, as PouchDB pulls.
        for chunk in stride(from: 0, to: feed.count, by: 25) {
            let rows = feed[chunk..<min(feed.count, chunk + 25)]
            let docs = rows.map { row in
                JSON.object([("id", row["id"] ?? .null), ("rev", row["changes"]?.arrayValue?.first?["rev"] ?? .null)])
            }
            let r = try await GatewayHTTP.request(
                .POST, "\(dbURL)/_bulk_get?revs=true&latest=true",
                body: JSON.object([("docs", .array(docs))]).serialized(),
                headers: [("Accept", "application/json")])
            for result in (try? JSON.parse(r.body)["results"]?.arrayValue) ?? [] {
                let id = result["id"]?.stringValue ?? ""
                let ok = result["docs"]?.arrayValue?.first?["ok"]
                if ok == nil || Self.application(ok) != expected[id] ?? nil {
                    problems.append("_bulk_get \(id): \(result.text.prefix(200))")
                }
            }
        }
        // A Lite pull of everything (the replicator that follows PouchDB's algorithm).
        let tablet = try Database(name: "tablet", directory: dir.path)
        defer { tablet.close() }
        let pull = await LiteConvergence.replicate(
            try RemoteEndpoint(url: dbURL, logger: LiteConvergence.quietLogger),
            LocalEndpoint(tablet, feedTimeoutMs: 1000))
        if pull.lastError != nil || pull.docWriteFailures > 0 { problems.append("Lite pull: \(pull)") }
        for w in accepted {
            let doc = try tablet.document(w.id)
            if doc.map({ Self.sorted($0.properties) }) != expected[w.id] ?? nil {
                problems.append(
                    "Lite pull \(w.id) (\(w.via)): \(doc.map { $0.properties.text.prefix(200) } ?? "missing")")
            }
        }
        let log = (try? String(contentsOf: s.gateway.logURL, encoding: .utf8)) ?? ""
        if !refusedKV.isEmpty && !log.contains("not imported") { problems.append("no log line for refused imports") }
        print(
            "GatewayFidelityPropertyProcessTests seed \(seed) shared=\(shared): \(written.count) documents, "
                + "\(accepted.count) accepted, \(written.count - accepted.count) refused, \(problems.count) problems")
        #expect(problems.isEmpty, "seed \(seed) shared=\(shared):\n\(problems.prefix(40).joined(separator: "\n"))")
    }
}
