import SetteeCore

/// Couchbase's JSON delta (Fleece `JSONDelta`, what LiteCore and Sync Gateway's `go-fleecedelta` send as the body of a
/// `rev` with `deltaSrc`; docs/adr/0125-json-delta-sync.md): the changes that turn one JSON value into another, as a
/// JSON value. Pure, written from the format's description (Fleece `Deltas.md` and `JSONDelta.cc`'s rules), no code
/// of theirs.
///
/// A delta for a value is one of:
/// - `{}` — no change (what `create` gives for equal values); on a scalar, the scalar unchanged.
/// - `{"k": d, ...}` on an object — member `k` patched by the delta `d`, inserted when the old object has none (then
///   `d` is the new value, as a scalar or `[value]`), removed when `d` is `[]`. Members the delta does not name stay.
///   The result keeps the old members in their order and appends the inserted ones in the delta's order.
/// - `{"i": d, ..., "n-": [v, ...]}` on an array — item `i` (decimal) patched by `d`; from index `n` on, the items
///   are replaced by the `[v, ...]` remainder (empty: the array is cut at `n`).
/// - `[v]` — replaced by `v` (inserted when there was nothing); `v` itself when nested and not an array or object.
/// - `[]` — removed (an object member).
/// - `["patch", 0, 2]` on a string — a text patch over the old string's UTF-8 bytes: `n=` copy `n` bytes, `n-` skip
///   `n`, `n+bytes|` insert the `n` bytes written after `+`; the copies and skips together cover the old string.
/// - `[old, new]` and `[old, 0, 0]` (JsonDiffPatch's replace and delete, which Fleece also reads): replaced, removed.
///
/// `create` makes what Fleece makes, with two differences that keep results byte-identical here, where object
/// members keep their order: an object whose new member order is not the one applying a member delta gives (kept
/// members in their old order, then the inserted ones) is replaced whole, and strings are patched by their common
/// prefix and suffix (one change region) instead of a diff-match-patch diff. Both are still plain Fleece deltas.
///
/// `apply` reads anything the format allows and refuses the rest with a `JSONDeltaError` (never a trap): a delta of
/// the wrong shape for the old value, an array key that no item uses, a text patch that does not cover the old
/// string or yields invalid UTF-8, a result deeper than `maxDepth` or longer than `maxBytes` serialised. What it
/// builds is bounded by its inputs (every old value and every delta value is used at most once), and the limits are
/// checked on the result before anyone stores it.
public enum JSONDelta {
    /// Strings shorter than this (UTF-8 bytes, the new one) are replaced, not patched (Fleece's
    /// `gMinStringDiffLength`): a patch of a short string saves nothing.
    public static let minStringPatchBytes = 60

    /// The delta turning `old` into `new`: `{}` when they serialise to the same bytes.
    public static func create(from old: JSON, to new: JSON) -> JSON {
        diff(old, new, nested: false) ?? .object([])
    }

    /// `new` rebuilt from `old` and `delta` (made by `create(from: old, to: new)` here or by a peer).
    /// - Parameters:
    ///   - maxDepth: deepest nesting the result may have (`JSON.nestingDepth`); also bounds the walk of the delta.
    ///   - maxBytes: longest the result may serialise to.
    /// - Throws: `JSONDeltaError` for a delta that does not apply to `old` or a result past the bounds.
    public static func apply(
        _ delta: JSON, to old: JSON, maxDepth: Int = Limits.maxDocumentDepth, maxBytes: Int = Limits.maxValueSize
    ) throws(JSONDeltaError) -> JSON {
        guard let result = try patch(old, delta, depth: 0, maxDepth: maxDepth) else {
            throw JSONDeltaError("the delta removes the whole value")
        }
        guard result.nestingDepth <= maxDepth else { throw JSONDeltaError("result nests deeper than \(maxDepth)") }
        guard result.serialized().count <= maxBytes else {
            throw JSONDeltaError("result is longer than \(maxBytes) bytes")
        }
        return result
    }

    // MARK: create

    /// The delta of one value, nil when there is no change. `nested`: a member or an item (a scalar replacement may
    /// then be written bare).
    private static func diff(_ old: JSON, _ new: JSON, nested: Bool) -> JSON? {
        switch (old, new) {
        case (.object(let o), .object(let n)):
            if let members = objectDiff(o, n) { return members.isEmpty ? nil : .object(members) }
        case (.array(let o), .array(let n)):
            if o.isEmpty && n.isEmpty { return nil }
            let common = min(o.count, n.count)
            if common > 0 {
                var members: [(String, JSON)] = []
                for i in 0..<common {
                    if let d = diff(o[i], n[i], nested: true) { members.append((String(i), d)) }
                }
                if o.count != n.count { members.append(("\(common)-", .array(Array(n[common...])))) }
                return members.isEmpty ? nil : .object(members)
            }
        case (.string(let a), .string(let b)):
            if a.utf8.elementsEqual(b.utf8) { return nil }
            if let p = stringPatch(Array(a.utf8), Array(b.utf8)) {
                return .array([.string(p), .integer(0), .integer(2)])
            }
        default:
            if sameScalar(old, new) { return nil }
        }
        return nested && !isContainer(new) ? new : .array([new])
    }

    /// Member deltas turning `o` into `n`, or nil when applying them could not give `n`'s member order.
    private static func objectDiff(_ o: [(String, JSON)], _ n: [(String, JSON)]) -> [(String, JSON)]? {
        var oldIndex: [Key: Int] = [:]
        for (i, (k, _)) in o.enumerated() { oldIndex[Key(k)] = i }
        var newKeys = Set<Key>()
        for (k, _) in n { newKeys.insert(Key(k)) }
        // The order `apply` produces: kept members in their old order, then the inserted ones in the delta's.
        var expected: [Key] = o.map { Key($0.0) }.filter { newKeys.contains($0) }
        expected += n.map { Key($0.0) }.filter { oldIndex[$0] == nil }
        guard expected.elementsEqual(n.map { Key($0.0) }) else { return nil }
        var members: [(String, JSON)] = []
        for (k, v) in n {
            if let i = oldIndex[Key(k)] {
                if let d = diff(o[i].1, v, nested: true) { members.append((k, d)) }
            } else {
                members.append((k, isContainer(v) ? .array([v]) : v))
            }
        }
        for (k, _) in o where !newKeys.contains(Key(k)) { members.append((k, .array([]))) }
        return members
    }

    /// A text patch from `a` to `b` (UTF-8): the common prefix copied, the middle of `a` skipped, the middle of `b`
    /// inserted, the common suffix copied; cuts fall on character boundaries. Nil when `b` is short or the patch would
    /// not be clearly shorter than `b` (Fleece gives up at patch + 6 >= `b`).
    private static func stringPatch(_ a: [UInt8], _ b: [UInt8]) -> String? {
        guard b.count >= minStringPatchBytes else { return nil }
        var prefix = 0
        let shorter = min(a.count, b.count)
        while prefix < shorter && a[prefix] == b[prefix] { prefix += 1 }
        while prefix > 0 && (isContinuation(a, prefix) || isContinuation(b, prefix)) { prefix -= 1 }
        var suffix = 0
        while suffix < shorter - prefix && a[a.count - 1 - suffix] == b[b.count - 1 - suffix] { suffix += 1 }
        while suffix > 0 && isContinuation(a, a.count - suffix) { suffix -= 1 }
        let deleted = a.count - prefix - suffix
        let inserted = b[prefix..<(b.count - suffix)]
        var out: [UInt8] = []
        if prefix > 0 { out += Array("\(prefix)=".utf8) }
        if deleted > 0 { out += Array("\(deleted)-".utf8) }
        if !inserted.isEmpty {
            out += Array("\(inserted.count)+".utf8)
            out += inserted
            out.append(UInt8(ascii: "|"))
        }
        if suffix > 0 { out += Array("\(suffix)=".utf8) }
        guard out.count + 6 < b.count else { return nil }
        return String(validating: out, as: UTF8.self)
    }

    /// The byte at `i` continues a UTF-8 character (so a cut there would split it).
    private static func isContinuation(_ bytes: [UInt8], _ i: Int) -> Bool {
        i < bytes.count && bytes[i] & 0xC0 == 0x80
    }

    /// Two values that are not both objects, both arrays or both strings serialise alike.
    private static func sameScalar(_ a: JSON, _ b: JSON) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case (.bool(let x), .bool(let y)): return x == y
        case (.integer(let x), .integer(let y)): return x == y
        case (.integer, .number), (.number, .integer), (.number, .number): return a.serialized() == b.serialized()
        default: return false
        }
    }

    private static func isContainer(_ v: JSON) -> Bool {
        switch v {
        case .array, .object: return true
        default: return false
        }
    }

    /// A member name compared by its UTF-8 bytes: Swift's `String ==` treats canonically equivalent spellings as
    /// equal, and a delta must tell `"é"` from `"e\u{301}"` as the bytes do.
    private struct Key: Hashable {
        let bytes: [UInt8]
        init(_ s: String) { bytes = Array(s.utf8) }
    }

    // MARK: apply

    /// `old` (nil: absent) patched by `delta`; nil when the delta removes it.
    private static func patch(_ old: JSON?, _ delta: JSON, depth: Int, maxDepth: Int) throws(JSONDeltaError) -> JSON? {
        guard depth <= maxDepth else { throw JSONDeltaError("delta nests deeper than \(maxDepth)") }
        switch delta {
        case .array(let items):
            switch items.count {
            case 0:
                guard old != nil else { throw JSONDeltaError("removes a value that is not there") }
                return nil
            case 1:
                return items[0]
            case 2:
                guard old != nil else { throw JSONDeltaError("replaces a value that is not there") }
                return items[1]
            case 3:
                switch items[2].intValue {
                case 0?:
                    guard old != nil else { throw JSONDeltaError("removes a value that is not there") }
                    return nil
                case 2?:
                    guard case .string(let text)? = old else { throw JSONDeltaError("text patch of a non-string") }
                    guard case .string(let p) = items[0], !p.isEmpty else { throw JSONDeltaError("empty text patch") }
                    return .string(try applyText(Array(text.utf8), patch: Array(p.utf8)))
                default:
                    throw JSONDeltaError("unknown delta mode")
                }
            default:
                throw JSONDeltaError("a delta array has 0 to 3 items, this one \(items.count)")
            }
        case .object(let members):
            switch old {
            case .object(let o)?: return .object(try patchObject(o, members, depth: depth, maxDepth: maxDepth))
            case .array(let a)?: return .array(try patchArray(a, members, depth: depth, maxDepth: maxDepth))
            case let value? where members.isEmpty: return value
            default: throw JSONDeltaError("object delta for a value that is neither an object nor an array")
            }
        default:
            return delta
        }
    }

    private static func isRemoval(_ delta: JSON) -> Bool {
        guard case .array(let items) = delta else { return false }
        return items.isEmpty || (items.count == 3 && items[2].intValue == 0)
    }

    private static func patchObject(
        _ old: [(String, JSON)], _ delta: [(String, JSON)], depth: Int, maxDepth: Int
    ) throws(JSONDeltaError) -> [(String, JSON)] {
        var byKey: [Key: Int] = [:]
        for (i, (k, _)) in delta.enumerated() { byKey[Key(k)] = i }
        var used = [Bool](repeating: false, count: delta.count)
        var out: [(String, JSON)] = []
        out.reserveCapacity(old.count + delta.count)
        for (k, v) in old {
            guard let i = byKey[Key(k)] else {
                out.append((k, v))
                continue
            }
            used[i] = true
            if isRemoval(delta[i].1) { continue }
            if let patched = try patch(v, delta[i].1, depth: depth + 1, maxDepth: maxDepth) { out.append((k, patched)) }
        }
        for (i, (k, d)) in delta.enumerated() where !used[i] {
            // A name repeated in the delta was matched by its first position only: the later one is not an insertion.
            guard byKey[Key(k)] == i else { throw JSONDeltaError("member named twice in the delta") }
            guard let inserted = try patch(nil, d, depth: depth + 1, maxDepth: maxDepth) else {
                throw JSONDeltaError("removes a member that is not there")
            }
            out.append((k, inserted))
        }
        return out
    }

    private static func patchArray(
        _ old: [JSON], _ delta: [(String, JSON)], depth: Int, maxDepth: Int
    ) throws(JSONDeltaError) -> [JSON] {
        var byKey: [String: JSON] = [:]
        for (k, v) in delta where byKey[k] == nil { byKey[k] = v }
        guard byKey.count == delta.count else { throw JSONDeltaError("array index named twice in the delta") }
        var used = 0
        var out: [JSON] = []
        out.reserveCapacity(old.count)
        var remainder: JSON? = nil
        for (i, item) in old.enumerated() {
            if let d = byKey[String(i)] {
                used += 1
                guard let patched = try patch(item, d, depth: depth + 1, maxDepth: maxDepth) else {
                    throw JSONDeltaError("removes an array item (arrays are cut with \"n-\")")
                }
                out.append(patched)
            } else if let r = byKey["\(i)-"] {
                remainder = r
                break
            } else {
                out.append(item)
            }
        }
        if remainder == nil { remainder = byKey["\(old.count)-"] }
        if let remainder {
            used += 1
            guard case .array(let tail) = remainder else { throw JSONDeltaError("array remainder is not an array") }
            out += tail
        }
        guard used == delta.count else { throw JSONDeltaError("array delta names an item the array does not use") }
        return out
    }

    /// Applies a text patch (`n=`, `n-`, `n+bytes|`) to `old`'s UTF-8 bytes.
    private static func applyText(_ old: [UInt8], patch: [UInt8]) throws(JSONDeltaError) -> String {
        var out: [UInt8] = []
        var pos = 0
        var i = 0
        while i < patch.count {
            var n = 0
            var digits = 0
            while i < patch.count, patch[i] >= UInt8(ascii: "0"), patch[i] <= UInt8(ascii: "9") {
                // Nine digits cannot overflow and exceed any string this codec is given.
                guard digits < 9 else { throw JSONDeltaError("text patch count too long") }
                n = n * 10 + Int(patch[i] - UInt8(ascii: "0"))
                digits += 1
                i += 1
            }
            guard digits > 0, i < patch.count else { throw JSONDeltaError("text patch op without a count") }
            let op = patch[i]
            i += 1
            switch op {
            case UInt8(ascii: "="):
                guard n <= old.count - pos else { throw JSONDeltaError("text patch copies past the old string") }
                out += old[pos..<(pos + n)]
                pos += n
            case UInt8(ascii: "-"):
                guard n <= old.count - pos else { throw JSONDeltaError("text patch skips past the old string") }
                pos += n
            case UInt8(ascii: "+"):
                guard n < patch.count - i, patch[i + n] == UInt8(ascii: "|") else {
                    throw JSONDeltaError("text patch insertion without its '|'")
                }
                out += patch[i..<(i + n)]
                i += n + 1
            default:
                throw JSONDeltaError("unknown text patch op")
            }
        }
        guard pos == old.count else { throw JSONDeltaError("text patch does not cover the old string") }
        guard let s = String(validating: out, as: UTF8.self) else {
            throw JSONDeltaError("text patch makes invalid UTF-8")
        }
        return s
    }
}

/// A delta that does not apply to the value it was sent for, or whose result breaks a bound.
public struct JSONDeltaError: Error, Equatable, CustomStringConvertible, Sendable {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { "invalid delta: \(reason)" }
}
