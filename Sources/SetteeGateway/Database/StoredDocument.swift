import SetteeCore
import SetteeDocument
import SetteeJSON

/// A channel a document left: the sequence and revision that removed it (a tombstone: `deleted`).
struct ChannelRemoval: Sendable, Equatable {
    var seq: UInt64
    var rev: RevID
    var deleted: Bool
    /// Seconds since the epoch when the document left the channel (`removed_at`; ADR 0151's age rule); nil for
    /// removals written before it was kept.
    var removedAt: UInt32? = nil
}

/// The `_sync` member of a document in the bucket (docs/adr/0011-gateway-bucket-layout.md).
struct SyncMeta: Sendable, Equatable {
    /// Every revision (bodies of non-winning leaves and recent ancestors included; the winner's body is the
    /// document's top level, not repeated here).
    var tree = RevTree()
    var sequence: UInt64 = 0
    var recentSequences: [UInt64] = []
    /// Channels of the winning revision.
    var channels: Set<String> = []
    /// Channels the document left, kept so readers of those channels get a `removed` row.
    var removals: [String: ChannelRemoval] = [:]
    /// `access()` grants of the winning revision: principal -> channel -> sequence granted.
    var access: [String: [String: UInt64]] = [:]
    /// `role()` grants of the winning revision: user -> role -> sequence granted.
    var roleAccess: [String: [String: UInt64]] = [:]
    /// Channels of each revision whose body is kept (what a reader must hold to read that revision).
    var revChannels: [RevID: Set<String>] = [:]
    /// FNV-1a of the serialized top-level body as this gateway wrote it (import detection).
    var bodyDigest: UInt64 = 0
    var expiry: UInt32? = nil
    /// Seconds since the epoch when the winner became a deletion (Sync Gateway's `_sync.tombstoned_at`); nil while
    /// the winner is live, and for tombstones written before this was kept (those are purged only by `_purge`).
    var tombstonedAt: UInt32? = nil
    /// Seconds since the epoch when each kept ancestor body was replaced (`_sync.old_body_at`: revision -> seconds;
    /// `OldBodyRule`, ADR 0156): the body goes once `old_rev_expiry_seconds` old.
    var oldBodyTimes: [RevID: UInt32] = [:]
    /// Shared bucket access only (docs/adr/0037): the winner's `_attachments` stubs, kept here so the body stays
    /// the application's, and the CAS of the gateway's last write of the item (`cas`, filled in by the data
    /// node from the `${Mutation.CAS}` macro; never written by `json()`).
    var attachments: JSON? = nil
    var cas: CAS? = nil
    /// Revisions whose body in `tree` is a `JSON.serialized()` object (serialized by this gateway, or by
    /// `RevTree.init(json:)` from a stored object), so `storageBytes` copies it rather than parsing and serializing it
    /// again. A cache of how the bytes were made, not part of the value: it never makes two metas unequal.
    var verbatim = VerbatimBodies()

    /// A set of revisions that compares equal to any other (see `SyncMeta.verbatim`).
    struct VerbatimBodies: Sendable, Equatable {
        var revs: Set<RevID> = []
        static func == (_: Self, _: Self) -> Bool { true }
    }

    func json() -> JSON {
        var t = tree
        if let w = t.winner { t.setBody(nil, of: w) }
        return .object(members(history: t.json()))
    }

    /// `json().serialized()`, written straight to bytes: the history's kept bodies that `verbatim` names are copied
    /// (`RevTree.writeStorage`), not parsed and serialized again, so an update writes its parent's body as it read
    /// it (issue 69 item 6).
    func storageBytes() -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "{")]
        for (i, (name, value)) in members(history: nil).enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            JSON.writeString(name, into: &out)
            out.append(UInt8(ascii: ":"))
            if name == "history" {
                tree.writeStorage(into: &out, omitting: tree.winner) { verbatim.revs.contains($0) }
            } else {
                value.write(into: &out)
            }
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// `json()`'s members in order, with `history` as given (nil: a `null` placeholder `storageBytes` writes over).
    private func members(history: JSON?) -> [(String, JSON)] {
        var m: [(String, JSON)] = []
        if let w = tree.winner {
            m.append(("rev", .string(w.description)))
            if tree.winnerIsDeleted { m.append(("deleted", .bool(true))) }
        }
        m.append(("sequence", .number(Double(sequence))))
        m.append(("recent_sequences", .array(recentSequences.map { .number(Double($0)) })))
        m.append(("history", history ?? .null))
        var ch: [(String, JSON)] = channels.sorted().map { ($0, JSON.null) }
        for (name, r) in removals.sorted(by: { $0.key < $1.key }) where !channels.contains(name) {
            var o: [(String, JSON)] = [("seq", .number(Double(r.seq))), ("rev", .string(r.rev.description))]
            if r.deleted { o.append(("del", .bool(true))) }
            if let at = r.removedAt { o.append(("removed_at", .number(Double(at)))) }
            ch.append((name, .object(o)))
        }
        m.append(("channels", .object(ch)))
        m.append(("access", Self.grantsJSON(access)))
        m.append(("role_access", Self.grantsJSON(roleAccess)))
        m.append(
            (
                "rev_channels",
                .object(
                    revChannels.sorted { $0.key.description < $1.key.description }.map {
                        ($0.key.description, .array($0.value.sorted().map { .string($0) }))
                    })
            ))
        m.append(("body_digest", .string(String(bodyDigest, radix: 16))))
        if let expiry { m.append(("exp", .number(Double(expiry)))) }
        if let tombstonedAt { m.append(("tombstoned_at", .number(Double(tombstonedAt)))) }
        if !oldBodyTimes.isEmpty {
            let times = oldBodyTimes.sorted { $0.key.description < $1.key.description }
            m.append(("old_body_at", .object(times.map { ($0.key.description, .number(Double($0.value))) })))
        }
        if let attachments { m.append(("attachments", attachments)) }
        return m
    }

    static func grantsJSON(_ g: [String: [String: UInt64]]) -> JSON {
        .object(
            g.sorted { $0.key < $1.key }.map { (p, chans) in
                (p, .object(chans.sorted { $0.key < $1.key }.map { ($0.key, .number(Double($0.value))) }))
            })
    }

    static func parseGrants(_ json: JSON?) -> [String: [String: UInt64]] {
        var out: [String: [String: UInt64]] = [:]
        for (p, v) in json?.objectValue ?? [] {
            var chans: [String: UInt64] = [:]
            for (c, s) in v.objectValue ?? [] { chans[c] = UInt64(max(0, s.intValue ?? 0)) }
            out[p] = chans
        }
        return out
    }

    init() {}

    init(json: JSON) throws(GatewayError) {
        guard case .object = json, let history = json["history"] else {
            throw .internalError("document metadata without a revision history")
        }
        do { tree = try RevTree(json: history) } catch {
            throw .internalError("unreadable revision history: \(error)")
        }
        // `RevTree.init(json:)` serialized each object body: those bytes are copied when this meta is written again.
        if let revs = history["revs"]?.arrayValue {
            for (key, body) in history["bodies"]?.objectValue ?? [] {
                guard case .object = body, let i = Int(key), revs.indices.contains(i),
                    let rev = revs[i].stringValue.flatMap(RevID.init)
                else { continue }
                verbatim.revs.insert(rev)
            }
        }
        sequence = UInt64(max(0, json["sequence"]?.intValue ?? 0))
        recentSequences = (json["recent_sequences"]?.arrayValue ?? []).compactMap {
            $0.intValue.map { UInt64(max(0, $0)) }
        }
        for (name, v) in json["channels"]?.objectValue ?? [] {
            if v.isNull {
                channels.insert(name)
            } else if let seq = v["seq"]?.intValue, let revText = v["rev"]?.stringValue, let rev = RevID(revText) {
                removals[name] = ChannelRemoval(
                    seq: UInt64(max(0, seq)), rev: rev, deleted: v["del"]?.boolValue ?? false,
                    removedAt: v["removed_at"]?.intValue.map { UInt32(clamping: $0) })
            }
        }
        access = Self.parseGrants(json["access"])
        roleAccess = Self.parseGrants(json["role_access"])
        for (r, chans) in json["rev_channels"]?.objectValue ?? [] {
            guard let rev = RevID(r) else { continue }
            revChannels[rev] = Set((chans.arrayValue ?? []).compactMap(\.stringValue))
        }
        bodyDigest = json["body_digest"]?.stringValue.flatMap { UInt64($0, radix: 16) } ?? 0
        expiry = json["exp"]?.intValue.map { UInt32(clamping: $0) }
        tombstonedAt = json["tombstoned_at"]?.intValue.map { UInt32(clamping: $0) }
        for (r, at) in json["old_body_at"]?.objectValue ?? [] {
            guard let rev = RevID(r), let seconds = at.intValue else { continue }
            oldBodyTimes[rev] = UInt32(clamping: seconds)
        }
        attachments = json["attachments"]
        cas = json["cas"]?.stringValue.flatMap(SharedBucketAccess.decodeMacroCAS)
    }
}

/// FNV-1a, 64 bits: a cheap fingerprint of a body (not a security measure).
func fnv1a(_ bytes: [UInt8]) -> UInt64 {
    var h: UInt64 = 0xcbf2_9ce4_8422_2325
    for b in bytes {
        h ^= UInt64(b)
        h = h &* 0x100_0000_01b3
    }
    return h
}

/// A document as the bucket holds it: the winning revision's body at the top level plus `_sync`.
struct StoredDocument: Sendable {
    var id: String
    /// The winning revision's stored body members (user properties and `_attachments`).
    var body: [(String, JSON)] {
        didSet { serializedBody = nil }
    }
    var meta: SyncMeta
    /// CAS of the bucket item it was read from (zero: not in the bucket yet).
    var cas: CAS
    /// The bucket item is a tombstone (shared bucket access keeps `_sync` on tombstones; the 1.x layout never
    /// deletes a document's item).
    var itemDeleted = false
    /// `JSON.object(body).serialized()` when the writer already has it (`commit` of a `put`), so the item's value
    /// is not serialized again (issue 69 item 6); nil otherwise. Only the write path reads it.
    var serializedBody: [UInt8]? = nil

    /// What a bucket item holds under a document key.
    enum Parsed {
        /// Written by a gateway and unchanged since.
        case gateway(StoredDocument)
        /// Written or changed by a KV client: its body, and the metadata a gateway left if any.
        case external(body: [(String, JSON)], meta: SyncMeta?, cas: CAS)
        /// Not a JSON object: nothing a gateway can serve.
        case foreign
        /// A KV client's JSON object the gateway cannot hold as a document: nesting deeper than
        /// `Limits.maxDocumentDepth`, or not JSON it can read (a number past a double's range, `1e400`; bad UTF-8).
        /// Never imported (nor altered), refused with a log line naming `reason` and a count
        /// (`GatewayDatabase.refuseImport`).
        case refused(reason: String)
        /// Shared bucket access: a KV client deleted a live gateway document; its tombstone kept `_sync`.
        case deletedByKV(meta: SyncMeta, cas: CAS)
        /// Shared bucket access: a tombstone without `_sync` (never a gateway document, or purged).
        case absent
        /// Shared bucket access over a 1.x item (`_sync` in the body, ADR 0011): the layout move to make first
        /// (`SharedBucketAccess.migrate`): `sync` for the XATTR, `body` without it, CAS-guarded by `cas`.
        case legacy(body: [UInt8], sync: [UInt8], winnerDeleted: Bool, cas: CAS)
    }

    /// The nesting a stored item (or `_sync` XATTR) may have: a body at the document bound, kept as a non-winning or
    /// ancestor revision, sits 4 levels down (`_sync.history.bodies.<n>`), within `Limits.documentEnvelopeDepth`.
    /// Read with the document bound alone, such a document became `.foreign`: unreadable and not updatable by anyone,
    /// after one push of a deep losing leaf.
    static let maxStoredDepth = Limits.maxJSONDepth

    /// Whether an application's body (its members; a 1.x item's `_sync` aside) nests deeper than
    /// `Limits.maxDocumentDepth`, the object itself counting 1.
    static func nestsTooDeep(_ body: [(String, JSON)]) -> Bool {
        body.contains { $0.0 != "_sync" && $0.1.nestingDepth >= Limits.maxDocumentDepth }
    }

    /// What an application's body that failed to parse is: refused when it is a JSON object the gateway cannot hold
    /// (too deep, or not readable: `1e400`, bad UTF-8), else `.foreign` (a binary value, a JSON array or string:
    /// nothing a gateway serves, skipped as Sync Gateway skips them).
    static func refusal(_ error: JSONError, of bytes: [UInt8]) -> Parsed {
        if error.bound == .depth { return .refused(reason: Self.tooDeepReason) }
        guard bytes.first(where: { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 }) == UInt8(ascii: "{") else {
            return .foreign
        }
        return .refused(reason: "the body is not JSON a gateway can read (\(error.reason))")
    }

    /// An application's body the parser read only by replacing invalid UTF-8 with U+FFFD (the data node stores it as
    /// raw, not JSON): importing it would alter it, so it is refused. Scanned only when a byte is above 0x7F.
    static func notUTF8(_ bytes: [UInt8]) -> Parsed? {
        JSON.parsedTextIsUTF8(bytes) ? nil : .refused(reason: "the body is not UTF-8")
    }

    static let tooDeepReason = "the body nests deeper than the document bound (\(Limits.maxDocumentDepth) levels)"

    static func parse(id: String, value: [UInt8], cas: CAS) -> Parsed {
        let parsed: JSON
        do { parsed = try JSON.parse(value, maxDepth: maxStoredDepth) } catch {
            return refusal(error, of: value)
        }
        guard case .object(let members) = parsed else { return .foreign }
        var body: [(String, JSON)] = []
        body.reserveCapacity(members.count)
        var syncJSON: JSON?
        for (k, v) in members {
            if k == "_sync" { syncJSON = v } else { body.append((k, v)) }
        }
        guard let syncJSON, let meta = try? SyncMeta(json: syncJSON), meta.tree.winner != nil else {
            if nestsTooDeep(members) { return .refused(reason: Self.tooDeepReason) }
            // A `_sync` member that is no gateway metadata is the application's: the body keeps it (and the import
            // refuses it as a reserved member rather than dropping it).
            if let refused = notUTF8(value) { return refused }
            return .external(body: members, meta: nil, cas: cas)
        }
        // Serialized once: for the digest and as the winner's body in the tree (it was serialized twice).
        let bodyBytes = JSON.object(body).serialized()
        if fnv1a(bodyBytes) != meta.bodyDigest {
            if nestsTooDeep(body) { return .refused(reason: Self.tooDeepReason) }
            if let refused = notUTF8(value) { return refused }
            return .external(body: body, meta: meta, cas: cas)
        }
        var doc = StoredDocument(id: id, body: body, meta: meta, cas: cas)
        if let w = meta.tree.winner {
            doc.meta.tree.setBody(bodyBytes, of: w)
            doc.meta.verbatim.revs.insert(w)
        }
        return .gateway(doc)
    }

    /// The bucket value: body members, then `_sync` (its digest recomputed).
    mutating func value() -> [UInt8] {
        let bodyBytes = serializedBody ?? JSON.object(body).serialized()
        meta.bodyDigest = fnv1a(bodyBytes)
        return Self.appending(member: "_sync", serialized: meta.storageBytes(), to: bodyBytes)
    }

    /// `appending(member:_:to:)` with the member's value already serialized (`value` is copied as it is).
    static func appending(member name: String, serialized value: [UInt8], to object: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(object.count + value.count + name.utf8.count + 4)
        out.append(contentsOf: object.dropLast())
        if object.count > 2 { out.append(UInt8(ascii: ",")) }
        JSON.writeString(name, into: &out)
        out.append(UInt8(ascii: ":"))
        out.append(contentsOf: value)
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// `object` (a serialized JSON object, as `JSON.serialized()` writes it: no whitespace) with one more member at
    /// its end: byte for byte `JSON.object(members + [(name, value)]).serialized()`, without serializing `members`
    /// again.
    static func appending(member name: String, _ value: JSON, to object: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(object.count + 256)
        out.append(contentsOf: object.dropLast())
        if object.count > 2 { out.append(UInt8(ascii: ",")) }
        JSON.writeString(name, into: &out)
        out.append(UInt8(ascii: ":"))
        value.write(into: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }
}
