import SetteeJSON

/// Why a revision could not be added to a tree.
public enum RevTreeError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The edit's parent is not a leaf (someone else edited it first), or the revision exists.
    case conflict
    /// The edit names a parent the tree does not hold.
    case missingParent
    /// A history or stored tree that does not hang together.
    case badHistory(String)

    public var description: String {
        switch self {
        case .conflict: return "Document update conflict"
        case .missingParent: return "missing parent revision"
        case .badHistory(let why): return "Bad _revisions: \(why)"
        }
    }
}

/// The revision tree of one document: every revision still remembered, its parent, whether it is a
/// deletion (tombstone), and the bodies kept for it.
///
/// Invariants:
/// 1. Every revision appears once; a parent's generation is exactly one less than its child's.
/// 2. A leaf is a revision with no child; the tree may have several roots after pruning or when
///    replicated histories were cut short.
/// 3. The winner is a pure function of the set of leaves (see `winner`), so every peer holding the same
///    revisions agrees on it whatever order they arrived in.
/// 4. Node order is insertion order; `json()` / `init(json:)` round-trip it exactly.
public struct RevTree: Sendable, Equatable {
    struct Node: Sendable, Equatable {
        var rev: RevID
        var parent: Int?
        var deleted: Bool
        var body: [UInt8]?
        var children: Int
    }

    private var nodes: [Node] = []
    private var index: [RevID: Int] = [:]

    public init() {}

    public var isEmpty: Bool { nodes.isEmpty }
    public var count: Int { nodes.count }

    /// Every revision the tree holds, in insertion order.
    public var revisions: [RevID] { nodes.map(\.rev) }

    public func contains(_ rev: RevID) -> Bool { index[rev] != nil }

    public var leaves: [RevID] { nodes.filter { $0.children == 0 }.map(\.rev) }

    /// CouchDB's rule: the non-deleted leaf with the highest (generation, digest); when every leaf is
    /// deleted, the highest deleted leaf. Nil for an empty tree.
    public var winner: RevID? {
        var best: Node?
        for node in nodes where node.children == 0 {
            guard let current = best else {
                best = node
                continue
            }
            if current.deleted != node.deleted {
                if current.deleted { best = node }
            } else if current.rev < node.rev {
                best = node
            }
        }
        return best?.rev
    }

    public var winnerIsDeleted: Bool {
        guard let w = winner, let i = index[w] else { return false }
        return nodes[i].deleted
    }

    /// Non-deleted leaves other than the winner, highest first.
    public var conflicts: [RevID] {
        let w = winner
        return nodes.filter { $0.children == 0 && !$0.deleted && $0.rev != w }.map(\.rev).sorted(by: >)
    }

    public func isLeaf(_ rev: RevID) -> Bool { index[rev].map { nodes[$0].children == 0 } ?? false }
    public func isDeleted(_ rev: RevID) -> Bool { index[rev].map { nodes[$0].deleted } ?? false }

    public func parent(of rev: RevID) -> RevID? {
        guard let i = index[rev], let p = nodes[i].parent else { return nil }
        return nodes[p].rev
    }

    /// `rev` and its ancestors, newest first, at most `limit` of them; empty when unknown.
    public func history(of rev: RevID, limit: Int = .max) -> [RevID] {
        var out: [RevID] = []
        var cursor = index[rev]
        while let i = cursor, out.count < limit {
            out.append(nodes[i].rev)
            cursor = nodes[i].parent
        }
        return out
    }

    /// The body kept for a revision: JSON of the user's properties plus `_attachments` stubs.
    public func body(of rev: RevID) -> [UInt8]? { index[rev].flatMap { nodes[$0].body } }

    public mutating func setBody(_ body: [UInt8]?, of rev: RevID) {
        guard let i = index[rev] else { return }
        nodes[i].body = body
    }

    /// A local edit. `parent` must be a leaf the tree holds (`.conflict` otherwise, `.missingParent` if
    /// unknown); nil only for a new document or to re-create one whose winner is deleted, in which case
    /// the tombstone becomes the parent. `rev` must be one generation above its parent.
    public mutating func add(_ rev: RevID, parent: RevID?, deleted: Bool, body: [UInt8]?) throws(RevTreeError) {
        guard index[rev] == nil else { throw .conflict }
        var parentIndex: Int?
        if let parent {
            guard let p = index[parent] else { throw .missingParent }
            guard nodes[p].children == 0 else { throw .conflict }
            parentIndex = p
        } else if !nodes.isEmpty {
            guard winnerIsDeleted, let w = winner else { throw .conflict }
            parentIndex = index[w]
        }
        let expected = RevID.nextGeneration(after: parentIndex.map { nodes[$0].rev })
        guard let expected, rev.generation == expected else {
            throw .badHistory("generation \(rev.generation) does not follow its parent (expected \(expected ?? 0))")
        }
        append(Node(rev: rev, parent: parentIndex, deleted: deleted, body: body, children: 0))
    }

    /// A replicated history (`new_edits=false`), newest first, consecutive generations. Grafts it onto
    /// the newest revision the tree already holds (or as a new root); the newest revision gets
    /// `deleted` and `body`, the ancestors it adds get neither. Returns how many revisions were new; 0
    /// means the newest was known and nothing changed except a missing body being filled in.
    @discardableResult
    public mutating func addHistory(_ history: [RevID], deleted: Bool, body: [UInt8]?) throws(RevTreeError) -> Int {
        guard let newest = history.first else { throw .badHistory("empty history") }
        for k in 1..<max(history.count, 1) where history[k].generation != history[k - 1].generation - 1 {
            throw .badHistory("generations are not consecutive at \(history[k])")
        }
        if let i = index[newest] {
            if nodes[i].body == nil, let body { nodes[i].body = body }
            return 0
        }
        var known = history.count
        for (k, rev) in history.enumerated() where index[rev] != nil {
            known = k
            break
        }
        var parentIndex: Int? = known < history.count ? index[history[known]] : nil
        for k in stride(from: known - 1, through: 0, by: -1) {
            let isNewest = k == 0
            append(
                Node(
                    rev: history[k], parent: parentIndex, deleted: isNewest && deleted,
                    body: isNewest ? body : nil, children: 0))
            parentIndex = nodes.count - 1
        }
        return known
    }

    /// Sync Gateway's pruning after an update (db/revtree.go `pruneRevisions`), in two rules:
    /// 1. Depth: every branch keeps only the `revsLimit` newest revisions counted from its leaf (the leaf is the
    ///    first); older ones are forgotten and their children become roots.
    /// 2. Resolved conflicts: a tombstoned leaf whose generation is below (the lowest generation of a live leaf −
    ///    `revsLimit`) is forgotten with its branch, so a conflict resolved by deleting the losing branch stops
    ///    costing revisions once the live branch has moved `revsLimit` generations past it. Without a live leaf
    ///    (a deleted document) no branch goes (Sync Gateway issue #2695).
    ///
    /// A revision is kept when it is within `revsLimit` of a leaf that rule 2 keeps. Sync Gateway deletes such a
    /// branch down to its root, ancestors shared with another tombstoned branch included; here they stay when
    /// that branch still reaches them within the limit (no leaf differs, only that branch's history is longer).
    /// A tree of at most `revsLimit` revisions is left alone, as Sync Gateway does. `revsLimit` below 1 counts as
    /// 1. Pure: the result depends only on the tree and the limit.
    public func pruned(revsLimit: Int) -> RevTree {
        var copy = self
        copy.prune(revsLimit: revsLimit)
        return copy
    }

    /// `pruned(revsLimit:)` in place. Returns how many revisions were dropped.
    @discardableResult
    public mutating func prune(revsLimit: Int) -> Int {
        let limit = max(revsLimit, 1)
        guard nodes.count > limit else { return 0 }
        // Rule 2's threshold; `m - limit` cannot overflow: m >= 1 and limit >= 1.
        let lowestLive = nodes.lazy.filter { $0.children == 0 && !$0.deleted }.map(\.rev.generation).min()
        let threshold = lowestLive.map { $0 - limit }
        var keep = [Bool](repeating: false, count: nodes.count)
        for (i, node) in nodes.enumerated() where node.children == 0 {
            if node.deleted, let threshold, node.rev.generation < threshold { continue }
            var cursor: Int? = i
            var depth = 0
            while let c = cursor, depth < limit {
                keep[c] = true
                cursor = nodes[c].parent
                depth += 1
            }
        }
        let dropped = keep.filter { !$0 }.count
        guard dropped > 0 else { return 0 }
        rebuild(keeping: keep)
        return dropped
    }

    /// Drops every kept body (leaves' included): the tree as a revision history alone.
    public mutating func dropBodies() {
        for i in nodes.indices { nodes[i].body = nil }
    }

    /// Drops the bodies of non-leaf revisions more than `keep` generations below every leaf they lead
    /// to (replicators fetch recent ancestors' bodies as `oldDoc`s and for `atts_since`), and of the nearest ones past
    /// `maxBytes` of ancestor bodies in all: the ancestors are taken nearest first (one generation below every leaf,
    /// then two…), each kept while the bytes kept so far and its own fit. Leaves always keep theirs. Without the byte
    /// bound a document kept 21 copies of its body, so a 6 MiB document could not be updated a third time (the value
    /// limit) and, with shared bucket access, a 60 KB one about its seventeenth (the 1 MiB system XATTR).
    public mutating func dropAncestorBodies(keep: Int, maxBytes: Int = .max) {
        var wanted = [Bool](repeating: false, count: nodes.count)
        var frontier: [Int] = []
        for (i, node) in nodes.enumerated() where node.children == 0 {
            wanted[i] = true
            frontier.append(i)
        }
        var bytes = 0
        var depth = 0
        while !frontier.isEmpty, depth < keep {
            depth += 1
            var next: [Int] = []
            for i in frontier {
                guard let p = nodes[i].parent, !wanted[p] else { continue }
                // Reached once (the first leaf's path to it), kept if its body fits what is left.
                wanted[p] = true
                next.append(p)
                let size = nodes[p].body?.count ?? 0
                if size > maxBytes - bytes {
                    nodes[p].body = nil
                } else {
                    bytes += size
                }
            }
            frontier = next
        }
        for i in nodes.indices where !wanted[i] { nodes[i].body = nil }
    }

    /// `_revs_diff` for one document: the revisions of `revs` the tree lacks, and the revisions a sender
    /// may treat as already here (`possible_ancestors`, used as `atts_since`): as CouchDB answers, the
    /// leaves of a lower generation than some missing revision. Only a leaf is sure to hold its
    /// attachments: an inner revision may have arrived as history alone, or had its body compacted, so a
    /// sender that took it as known would send stubs for bytes this database never had.
    public func revsDiff(_ revs: [RevID]) -> (missing: [RevID], possibleAncestors: [RevID]) {
        var missing: [RevID] = []
        var seen = Set<RevID>()
        for rev in revs where index[rev] == nil && seen.insert(rev).inserted { missing.append(rev) }
        guard let highest = missing.map(\.generation).max() else { return ([], []) }
        let ancestors = nodes.filter { $0.children == 0 && $0.rev.generation < highest }.map(\.rev)
        return (missing, ancestors.sorted())
    }

    /// `_revisions` for `rev`: `{"start": generation, "ids": [digests, newest first]}`, at most `limit`
    /// ids, stopping after the first revision found in `knownAncestors` (the receiver has it).
    public func revisionsJSON(of rev: RevID, limit: Int = .max, knownAncestors: Set<RevID> = []) -> JSON {
        var ids: [JSON] = []
        for r in history(of: rev, limit: limit) {
            ids.append(.string(r.digest))
            if r != rev && knownAncestors.contains(r) { break }
        }
        return .object([("start", .number(Double(rev.generation))), ("ids", .array(ids))])
    }

    /// Parses `_revisions` (`start` must be `rev`'s generation and `ids[0]` its digest) into a newest-first
    /// history.
    public static func parseRevisions(_ json: JSON, rev: RevID) throws(RevTreeError) -> [RevID] {
        guard let start = json["start"]?.intValue, let ids = json["ids"]?.arrayValue, !ids.isEmpty else {
            throw .badHistory("needs start and a non-empty ids list")
        }
        guard start == rev.generation else { throw .badHistory("start \(start) is not \(rev)'s generation") }
        guard start - ids.count + 1 >= 1 else { throw .badHistory("more ids than generations") }
        var out: [RevID] = []
        out.reserveCapacity(ids.count)
        for (k, id) in ids.enumerated() {
            guard let digest = id.stringValue else { throw .badHistory("ids must be strings") }
            // The same rule as a `_rev`: a digest `RevID(_:)` refuses would be stored and then make the tree
            // unparsable (`init(json:)`), the document unreadable from then on.
            guard RevID.isValidDigest(digest) else { throw .badHistory("Invalid revision ID in ids[\(k)]") }
            out.append(RevID(generation: start - k, digest: digest))
        }
        guard out[0] == rev else { throw .badHistory("ids[0] is not \(rev)'s digest") }
        return out
    }

    // MARK: Storage form

    /// `{"revs":[...], "parents":[index or -1], "deleted":[indices], "bodies":{"index": body}}`.
    public func json() -> JSON {
        var bodies: [(String, JSON)] = []
        for (i, node) in nodes.enumerated() {
            guard let body = node.body else { continue }
            bodies.append((String(i), (try? JSON.parse(body)) ?? .string(String(decoding: body, as: UTF8.self))))
        }
        return .object([
            ("revs", .array(nodes.map { .string($0.rev.description) })),
            ("parents", .array(nodes.map { .number(Double($0.parent ?? -1)) })),
            ("deleted", .array(nodes.indices.filter { nodes[$0].deleted }.map { .number(Double($0)) })),
            ("bodies", .object(bodies)),
        ])
    }

    /// `json().serialized()`, byte for byte, written straight to bytes (the revision tree is rewritten by
    /// every save; building the `JSON` value first was a measurable share of a Lite save).
    public func storageBytes() -> [UInt8] {
        var out: [UInt8] = []
        writeStorage(into: &out)
        return out
    }

    /// Appends the storage form (`json()`'s members, in its order) to `out`, without building a `JSON` value. A body
    /// `verbatim` says is a `JSON.serialized()` object (the writer serialized it, or `init(json:)` did) is copied as
    /// it is; any other is parsed and written as `json()` writes it (a string when it does not parse), so the output
    /// is `json().serialized()` byte for byte. The body of `omitting` is left out (a document's winner, whose body
    /// is stored beside the tree). The gateway writes `_sync.history` this way: each kept body copied, not parsed
    /// and serialized again (issue 69 item 6).
    public func writeStorage(
        into out: inout [UInt8], omitting: RevID? = nil, verbatim: (RevID) -> Bool = { _ in false }
    ) {
        out.reserveCapacity(out.count + 48 + nodes.count * 48)
        out.append(contentsOf: #"{"revs":["#.utf8)
        for (i, node) in nodes.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            JSON.writeString(node.rev.description, into: &out)
        }
        out.append(contentsOf: #"],"parents":["#.utf8)
        for (i, node) in nodes.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: String(node.parent ?? -1).utf8)
        }
        out.append(contentsOf: #"],"deleted":["#.utf8)
        var first = true
        for (i, node) in nodes.enumerated() where node.deleted {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            out.append(contentsOf: String(i).utf8)
        }
        out.append(contentsOf: #"],"bodies":{"#.utf8)
        first = true
        for (i, node) in nodes.enumerated() {
            guard let body = node.body, node.rev != omitting else { continue }
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            JSON.writeString(String(i), into: &out)
            out.append(UInt8(ascii: ":"))
            if verbatim(node.rev) {
                out.append(contentsOf: body)
            } else {
                ((try? JSON.parse(body)) ?? .string(String(decoding: body, as: UTF8.self))).write(into: &out)
            }
        }
        out.append(contentsOf: #"}}"#.utf8)
    }

    public init(json: JSON) throws(RevTreeError) {
        guard let revs = json["revs"]?.arrayValue, let parents = json["parents"]?.arrayValue,
            revs.count == parents.count
        else { throw .badHistory("stored tree lacks revs/parents") }
        var deleted = Set<Int>()
        for d in json["deleted"]?.arrayValue ?? [] {
            guard let i = d.intValue else { throw .badHistory("bad deleted index") }
            deleted.insert(i)
        }
        for (i, text) in revs.enumerated() {
            guard let s = text.stringValue, let rev = RevID(s), index[rev] == nil else {
                throw .badHistory("bad revision at \(i)")
            }
            guard let p = parents[i].intValue, p >= -1, p < i else { throw .badHistory("bad parent at \(i)") }
            append(Node(rev: rev, parent: p < 0 ? nil : p, deleted: deleted.contains(i), body: nil, children: 0))
        }
        for (key, body) in json["bodies"]?.objectValue ?? [] {
            guard let i = Int(key), i >= 0, i < nodes.count else { throw .badHistory("bad body index") }
            if case .string(let text) = body {
                nodes[i].body = Array(text.utf8)
            } else {
                nodes[i].body = body.serialized()
            }
        }
    }

    // MARK: Internals

    private mutating func append(_ node: Node) {
        if let p = node.parent { nodes[p].children += 1 }
        index[node.rev] = nodes.count
        nodes.append(node)
    }

    private mutating func rebuild(keeping keep: [Bool]) {
        var newIndexOf = [Int?](repeating: nil, count: nodes.count)
        var rebuilt: [Node] = []
        for (i, node) in nodes.enumerated() where keep[i] {
            newIndexOf[i] = rebuilt.count
            var copy = node
            copy.children = 0
            copy.parent = node.parent.flatMap { newIndexOf[$0] }
            rebuilt.append(copy)
        }
        nodes = []
        index = [:]
        for node in rebuilt { append(node) }
    }
}
