import SetteeCore

/// A parsed JSON value: the one JSON type of the codebase (views, the sync gateway, Lite, cluster configs,
/// admin and peer replies, the client, the benchmarks). Object members keep their order (CouchDB
/// collation compares objects member by member in emitted order, output echoes input order, and revision
/// ids digest the body as written).
///
/// Numbers have two cases (`docs/adr/0026-one-json-value.md`): an integer written without fraction or
/// exponent that fits `Int64` or `UInt64` parses into `.integer`, exactly (CAS values, seqnos and vBucket
/// UUIDs are 64-bit); every other number is a `.number` double, as in JavaScript. The two cases are one
/// number to everything but a `switch`: `==` compares numerically (`1 == 1.0`), collation sorts both as
/// doubles, and `numberValue` / `intValue` / `int64Value` / `uint64Value` read either.
///
/// Not `indirect`: arrays and objects hold their elements out of line already, and boxing every case put each
/// scalar in a heap allocation of its own (a number in an array held 55 bytes instead of 32; ADR 0113).
public enum JSON: Sendable, Equatable {
    case null
    case bool(Bool)
    /// An exact integer in `Int64.min ... UInt64.max` (`Int128` is the smallest type holding both ranges).
    case integer(Int128)
    case number(Double)
    case string(String)
    case array([JSON])
    case object([(String, JSON)])

    /// An exact integer: `.integer` when `value` lies in `Int64.min ... UInt64.max`, else the nearest double.
    public static func int(_ value: some BinaryInteger) -> JSON {
        if let v = Int128(exactly: value), v >= JSON.integerRange.lowerBound, v <= JSON.integerRange.upperBound {
            return .integer(v)
        }
        return .number(Double(value))
    }

    /// The values `.integer` holds: everything `Int64` or `UInt64` can.
    public static let integerRange: ClosedRange<Int128> = Int128(Int64.min)...Int128(UInt64.max)

    /// Numeric for numbers (`.integer(1) == .number(1.0)`, `-0.0 == 0`), member by member in order for objects.
    public static func == (a: JSON, b: JSON) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case (.bool(let x), .bool(let y)): return x == y
        case (.integer(let x), .integer(let y)): return x == y
        case (.number(let x), .number(let y)): return x == y
        case (.integer(let i), .number(let d)), (.number(let d), .integer(let i)): return Int128(exactly: d) == i
        case (.string(let x), .string(let y)): return x == y
        case (.array(let x), .array(let y)): return x == y
        case (.object(let x), .object(let y)):
            return x.count == y.count && zip(x, y).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: return false
        }
    }

    /// Member `name` of an object, nil otherwise (parsed objects hold each name once).
    public subscript(_ name: String) -> JSON? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.0 == name }?.1
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    public var arrayValue: [JSON]? {
        if case .array(let a) = self { return a }
        return nil
    }

    public var objectValue: [(String, JSON)]? {
        if case .object(let o) = self { return o }
        return nil
    }

    /// Either number case as a double (an integer above 2^53 rounds to the nearest).
    public var numberValue: Double? {
        switch self {
        case .integer(let i): return Double(i)
        case .number(let d): return d
        default: return nil
        }
    }

    /// The number when it is integral and fits an `Int` exactly, else nil.
    public var intValue: Int? { exactInteger.flatMap { Int(exactly: $0) } }

    /// The number when it is integral and fits an `Int64` exactly, else nil.
    public var int64Value: Int64? { exactInteger.flatMap { Int64(exactly: $0) } }

    /// The number when it is integral and fits a `UInt64` exactly (CAS, seqnos, vBucket UUIDs), else nil.
    public var uint64Value: UInt64? { exactInteger.flatMap { UInt64(exactly: $0) } }

    /// An integer, or a double with no fraction (some writers render counts as `3.0`).
    private var exactInteger: Int128? {
        switch self {
        case .integer(let i): return i
        case .number(let d): return Int128(exactly: d)
        default: return nil
        }
    }

    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// Sets (replacing in place, or appending) or, with nil, removes member `name` of an object;
    /// does nothing to other values.
    public mutating func set(_ name: String, _ value: JSON?) {
        guard case .object(var members) = self else { return }
        if let i = members.firstIndex(where: { $0.0 == name }) {
            if let value { members[i].1 = value } else { members.remove(at: i) }
        } else if let value {
            members.append((name, value))
        }
        self = .object(members)
    }

    // MARK: Serialisation

    /// Compact UTF-8 JSON.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        write(into: &out)
        return out
    }

    public var text: String { String(decoding: serialized(), as: UTF8.self) }

    public func write(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .integer(let i): out.append(contentsOf: String(i).utf8)
        case .number(let d): Self.writeNumber(d, into: &out)
        case .string(let s): Self.writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                item.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (i, (key, value)) in members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                Self.writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                value.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Integral doubles up to 2^53 print without a fraction, and NaN and infinities as `null`
    /// (as JavaScript's `JSON.stringify` does).
    public static func writeNumber(_ d: Double, into out: inout [UInt8]) {
        if !d.isFinite {
            out.append(contentsOf: "null".utf8)
        } else if d == d.rounded(), abs(d) < 9_007_199_254_740_992 {
            out.append(contentsOf: String(Int64(d)).utf8)
        } else {
            out.append(contentsOf: "\(d)".utf8)
        }
    }

    private static let hex: [UInt8] = Array("0123456789abcdef".utf8)

    public static func writeString(_ s: String, into out: inout [UInt8]) {
        var s = s
        // Native strings are contiguous already (no copy); a bridged one is made so once.
        s.makeContiguousUTF8()
        let done: Void? = s.utf8.withContiguousStorageIfAvailable { writeEscaped($0, into: &out) }
        if done == nil { writeEscaped(Array(s.utf8), into: &out) }
    }

    /// `bytes` (UTF-8) as a JSON string: runs that need no escape are copied whole, which is most of
    /// any document's text (the per-byte loop this replaced was the largest cost of saving a Lite document).
    private static func writeEscaped(_ bytes: UnsafeBufferPointer<UInt8>, into out: inout [UInt8]) {
        out.reserveCapacity(out.count + bytes.count + 2)
        out.append(UInt8(ascii: "\""))
        var run = 0
        var i = 0
        while i < bytes.count {
            // Eight bytes at a time while none of them needs an escape (the per-byte test below was
            // the largest Swift cost of a Lite save after the copy of whole runs).
            if i + 8 <= bytes.count, let base = bytes.baseAddress,
                !wordNeedsEscape(UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self))
            {
                i += 8
                continue
            }
            let at = i
            let byte = bytes[at]
            i += 1
            // UTF-8 above 0x7F passes through unescaped, as JSON allows.
            if byte >= 0x20 && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\") { continue }
            if run < at { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run..<at])) }
            run = at + 1
            out.append(UInt8(ascii: "\\"))
            switch byte {
            case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
            case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
            case 0x0A: out.append(UInt8(ascii: "n"))
            case 0x0D: out.append(UInt8(ascii: "r"))
            case 0x09: out.append(UInt8(ascii: "t"))
            default:
                out.append(UInt8(ascii: "u"))
                out.append(UInt8(ascii: "0"))
                out.append(UInt8(ascii: "0"))
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xF)])
            }
        }
        if run < bytes.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run..<bytes.count])) }
        out.append(UInt8(ascii: "\""))
    }

    /// True when one of the eight bytes of `w` is below 0x20, a quote or a backslash (exact, by the
    /// "has a byte less than n" and "has a zero byte" word tricks; a false answer skips all eight).
    @inline(__always)
    static func wordNeedsEscape(_ w: UInt64) -> Bool {
        let high: UInt64 = 0x8080_8080_8080_8080
        let ones: UInt64 = 0x0101_0101_0101_0101
        let control = (w &- 0x2020_2020_2020_2020) & ~w & high
        let q = w ^ 0x2222_2222_2222_2222
        let quote = (q &- ones) & ~q & high
        let b = w ^ 0x5C5C_5C5C_5C5C_5C5C
        let backslash = (b &- ones) & ~b & high
        return (control | quote | backslash) != 0
    }

    private static func writeEscaped(_ bytes: [UInt8], into out: inout [UInt8]) {
        bytes.withUnsafeBufferPointer { writeEscaped($0, into: &out) }
    }

    // MARK: Parsing

    /// Parses UTF-8 JSON text (RFC 8259, whole input, surrounding whitespace allowed).
    ///
    /// Rules beyond the grammar (`docs/adr/0026-one-json-value.md`): input longer than `maxBytes`, nesting
    /// more than `maxDepth` arrays/objects, or holding more than `maxValues` values (every scalar, array,
    /// object and object member counts one) is refused before it is read further; a number too
    /// large for a double (`1e309`) is refused; a leading byte order mark is refused (Couchbase's JSON
    /// check and Sync Gateway refuse it too); a repeated member name keeps its first position and its
    /// last value (as JavaScript's `JSON.parse`); an unpaired UTF-16 surrogate escape and invalid UTF-8
    /// become U+FFFD (as Sync Gateway's Go decoder does).
    public static func parse(
        _ bytes: [UInt8], maxDepth: Int = Limits.maxJSONDepth, maxBytes: Int = Limits.maxJSONBytes,
        maxValues: Int = Limits.maxJSONValues
    ) throws(JSONError) -> JSON {
        guard bytes.count <= maxBytes else {
            throw JSONError(offset: 0, reason: "longer than \(maxBytes) bytes", bound: .bytes)
        }
        return try bytes.withUnsafeBufferPointer { buf throws(JSONError) in
            var p = JSONReader(bytes: buf, maxDepth: maxDepth, maxValues: maxValues)
            return try p.document()
        }
    }

    /// Parses any byte collection (`Data`, an `ArraySlice`, a buffer's readable bytes) without copying
    /// when it is contiguous.
    public static func parse(
        _ bytes: some Collection<UInt8>, maxDepth: Int = Limits.maxJSONDepth, maxBytes: Int = Limits.maxJSONBytes,
        maxValues: Int = Limits.maxJSONValues
    ) throws(JSONError) -> JSON {
        guard bytes.count <= maxBytes else {
            throw JSONError(offset: 0, reason: "longer than \(maxBytes) bytes", bound: .bytes)
        }
        let parsed: Result<JSON, JSONError>? = bytes.withContiguousStorageIfAvailable { buf in
            var p = JSONReader(bytes: buf, maxDepth: maxDepth, maxValues: maxValues)
            return Result { () throws(JSONError) -> JSON in try p.document() }
        }
        if let parsed { return try parsed.get() }
        return try parse(Array(bytes), maxDepth: maxDepth, maxBytes: maxBytes, maxValues: maxValues)
    }

    public static func parse(
        _ text: String, maxDepth: Int = Limits.maxJSONDepth, maxBytes: Int = Limits.maxJSONBytes,
        maxValues: Int = Limits.maxJSONValues
    ) throws(JSONError) -> JSON {
        try parse(Array(text.utf8), maxDepth: maxDepth, maxBytes: maxBytes, maxValues: maxValues)
    }
}

extension JSON {
    /// Bytes a parsed value may hold in memory, at most, for each value `JSON.parse` counts (a scalar, an array, an
    /// object, an object member): the size of an object's member, a name and a value. What bounds a tree's memory
    /// by its count of values, for a caller that must count it (a view query's budget).
    public static let heldBytesPerValue = MemoryLayout<(String, JSON)>.stride

    /// Parses a JSON object whose member `name` is an array, handing each of that array's elements to `each` as soon
    /// as it is read instead of keeping it: what such a text parses into can be far larger than its bytes (a view
    /// peer's `{"rows":[…]}` of dense keys), and this holds one element's tree at a time. The object is returned with
    /// its other members and `name` as an empty array (a repeated `name` streams its elements too). Each element may
    /// hold at most `maxElementValues()` values, asked before it is read; the rest of the text `maxValues`. Errors
    /// are `JSON.parse`'s (`JSONError`) or what `each` throws; a text that is not an object is refused.
    public static func parse(
        _ bytes: [UInt8], streaming name: String, maxDepth: Int = Limits.maxJSONDepth,
        maxBytes: Int = Limits.maxJSONBytes, maxValues: Int, maxElementValues: () -> Int,
        each: (JSON) throws -> Void
    ) throws -> JSON {
        guard bytes.count <= maxBytes else {
            throw JSONError(offset: 0, reason: "longer than \(maxBytes) bytes", bound: .bytes)
        }
        return try bytes.withUnsafeBufferPointer { buf in
            var p = JSONReader(bytes: buf, maxDepth: maxDepth, maxValues: maxValues)
            return try p.streamedDocument(name: name, maxElementValues: maxElementValues, each: each)
        }
    }
}

/// One element of the array `JSON.parse(_:elementsOf:…)` reads.
public enum JSONElement: Sendable, Equatable {
    /// The element, within the element bound.
    case value(JSON)
    /// An element nesting deeper than the element bound, refused on its own: its members down to the bound (what
    /// lay deeper is `null` here, never to be stored), so that its answer can still name it (`_id`).
    case tooDeep(JSON)
    /// An element holding a number past a double's range (`1e400`), which no reader here (nor JavaScript) can
    /// represent: refused on its own (the number is `null` here, never to be stored).
    case outOfRange(JSON)
}

extension JSON {
    /// Parses a JSON object whose member `name` is an array of documents (`_bulk_docs`' `{"docs":[…]}`), bounding each
    /// element's depth on its own: an element nesting deeper than `maxElementDepth` (itself counting 1) does not fail
    /// the text but comes back as `.tooDeep`, its deeper parts skipped without recursion (checked for balance and
    /// string syntax only), so one document fails only its own row. The object comes back with `name` as an empty
    /// array. `maxValues` bounds the whole text as `JSON.parse`'s does; the object's other members are bounded by
    /// `maxDepth`. A text that is not an object, or whose `name` is not an array, is parsed as `JSON.parse` would
    /// and gives no elements.
    public static func parse(
        _ bytes: [UInt8], elementsOf name: String, maxElementDepth: Int, maxDepth: Int = Limits.maxJSONDepth,
        maxBytes: Int = Limits.maxJSONBytes, maxValues: Int = Limits.maxJSONValues
    ) throws(JSONError) -> (object: JSON, elements: [JSONElement]) {
        guard bytes.count <= maxBytes else {
            throw JSONError(offset: 0, reason: "longer than \(maxBytes) bytes", bound: .bytes)
        }
        return try bytes.withUnsafeBufferPointer { buf throws(JSONError) in
            var p = JSONReader(bytes: buf, maxDepth: maxDepth, maxValues: maxValues)
            return try p.elementsDocument(name: name, maxElementDepth: maxElementDepth)
        }
    }
}

/// Invalid JSON: where and why.
public struct JSONError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The parse's bounds a text can pass (`JSON.parse`'s `maxBytes`, `maxDepth`, `maxValues`).
    public enum Bound: Sendable, Equatable {
        case bytes, depth, values
    }
    public var offset: Int
    public var reason: String
    /// Set when the text was refused for passing one of the parse's bounds rather than for its grammar: a caller
    /// whose text holds many documents can ask for fewer (the replicator's `_bulk_get`).
    public var bound: Bound? = nil
    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

/// The recursive-descent reader behind `JSON.parse`; recursion is bounded by `maxDepth`, the values it makes
/// (and so what the tree holds) by `maxValues`.
private struct JSONReader {
    let bytes: UnsafeBufferPointer<UInt8>
    /// `elementsDocument` lowers it to an element's bound while it reads one.
    var maxDepth: Int
    /// Set by `elementsDocument`: a container deeper than `maxDepth` is skipped (`skipContainer`) and read as `null`,
    /// `overflowed` set, instead of failing the text.
    var skipsTooDeep = false
    var overflowed = false
    /// Set while `elementsDocument` reads an element: a number past a double's range is read as `null`,
    /// `outOfRange` set, instead of failing the text.
    var outOfRange = false
    /// The bound `countValue` checks; `streamedDocument` sets it for each element it streams.
    var maxValues: Int
    var index = 0
    /// Values made so far, each counted before it is read (never above `maxValues`).
    var values = 0

    /// Past this many members an object finds repeated names through a dictionary, not a scan.
    static let linearMemberScan = 16

    init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int, maxValues: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
        self.maxValues = maxValues
    }

    func fail(_ reason: String) -> JSONError { JSONError(offset: index, reason: reason) }

    /// Counts one more value (a scalar, an array, an object or an object member) before it is read.
    mutating func countValue() throws(JSONError) {
        guard values < maxValues else {
            throw JSONError(offset: index, reason: "more than \(maxValues) values", bound: .values)
        }
        values += 1
    }

    /// JSON texts are UTF-8 without a byte order mark (RFC 8259 §8.1).
    func refuseByteOrderMark() throws(JSONError) {
        if bytes.count >= 3, bytes[0] == 0xEF, bytes[1] == 0xBB, bytes[2] == 0xBF {
            throw fail("byte order mark")
        }
    }

    mutating func document() throws(JSONError) -> JSON {
        try refuseByteOrderMark()
        let v = try value(depth: 0)
        skipWhitespace()
        guard index == bytes.count else { throw fail("trailing characters") }
        return v
    }

    /// `JSON.parse(_:streaming:…)`: the top-level object, `name`'s array elements handed to `each`, each counted
    /// against its own `maxElementValues()` and not kept.
    mutating func streamedDocument(
        name: String, maxElementValues: () -> Int, each: (JSON) throws -> Void
    ) throws -> JSON {
        try refuseByteOrderMark()
        skipWhitespace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: "{") else { throw fail("expected an object") }
        guard maxDepth > 1 else {
            throw JSONError(offset: index, reason: "nested deeper than \(maxDepth)", bound: .depth)
        }
        try countValue()
        index += 1
        var members = Members()
        if !closesAtOnce(UInt8(ascii: "}")) {
            repeat {
                let key = try memberName()
                skipWhitespace()
                if key == name, index < bytes.count, bytes[index] == UInt8(ascii: "[") {
                    try streamElements(maxElementValues: maxElementValues, each: each)
                    members.keep(key, .array([]))
                } else {
                    members.keep(key, try value(depth: 1))
                }
            } while try anotherFollows(before: UInt8(ascii: "}"))
        }
        skipWhitespace()
        guard index == bytes.count else { throw fail("trailing characters") }
        return .object(members.list)
    }

    /// The array at `index` (a member of the top-level object), each element read under its own bound and handed to
    /// `each`.
    private mutating func streamElements(maxElementValues: () -> Int, each: (JSON) throws -> Void) throws {
        try countValue()
        index += 1
        if closesAtOnce(UInt8(ascii: "]")) { return }
        let outer = (values: values, maxValues: maxValues)
        repeat {
            values = 0
            maxValues = maxElementValues()
            let element = try value(depth: 2)
            values = outer.values
            maxValues = outer.maxValues
            try each(element)
        } while try anotherFollows(before: UInt8(ascii: "]"))
    }

    /// `JSON.parse(_:elementsOf:…)`: the top-level object, `name`'s array elements each read under its own depth bound
    /// (2 levels, the object and the array, lie above an element).
    mutating func elementsDocument(
        name: String, maxElementDepth: Int
    ) throws(JSONError) -> (object: JSON, elements: [JSONElement]) {
        try refuseByteOrderMark()
        skipWhitespace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: "{"), maxDepth > 1 else { return (try document(), []) }
        try countValue()
        index += 1
        var members = Members()
        var elements: [JSONElement] = []
        if !closesAtOnce(UInt8(ascii: "}")) {
            repeat {
                let key = try memberName()
                skipWhitespace()
                if key == name, index < bytes.count, bytes[index] == UInt8(ascii: "[") {
                    try countValue()
                    index += 1
                    if !closesAtOnce(UInt8(ascii: "]")) {
                        let outer = maxDepth
                        maxDepth = min(outer, 2 + maxElementDepth)
                        skipsTooDeep = true
                        defer {
                            maxDepth = outer
                            skipsTooDeep = false
                        }
                        repeat {
                            overflowed = false
                            outOfRange = false
                            let element = try value(depth: 2)
                            elements.append(
                                overflowed ? .tooDeep(element) : outOfRange ? .outOfRange(element) : .value(element))
                        } while try anotherFollows(before: UInt8(ascii: "]"))
                    }
                    members.keep(key, .array([]))
                } else {
                    members.keep(key, try value(depth: 1))
                }
            } while try anotherFollows(before: UInt8(ascii: "}"))
        }
        skipWhitespace()
        guard index == bytes.count else { throw fail("trailing characters") }
        return (.object(members.list), elements)
    }

    /// Past the container opening at `index` (`[` or `{`), however deep it nests, without recursion or building it:
    /// brackets must pair up and strings must close; what lies between is not checked further (the container is
    /// refused whole). The kinds of the open containers are kept in a heap array, at most one per byte read.
    mutating func skipContainer() throws(JSONError) {
        var closers: [UInt8] = []
        while index < bytes.count {
            let c = bytes[index]
            switch c {
            case UInt8(ascii: "["): closers.append(UInt8(ascii: "]"))
            case UInt8(ascii: "{"): closers.append(UInt8(ascii: "}"))
            case UInt8(ascii: "]"), UInt8(ascii: "}"):
                guard closers.popLast() == c else { throw fail("unbalanced \(Character(Unicode.Scalar(c)))") }
                if closers.isEmpty {
                    index += 1
                    return
                }
            case UInt8(ascii: "\""):
                index += 1
                while index < bytes.count, bytes[index] != UInt8(ascii: "\"") {
                    index += bytes[index] == UInt8(ascii: "\\") ? 2 : 1
                }
                guard index < bytes.count else { throw fail("unterminated string") }
            default: break
            }
            index += 1
        }
        throw fail("unexpected end")
    }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    /// `depth` is the number of arrays and objects around this value.
    mutating func value(depth: Int) throws(JSONError) -> JSON {
        skipWhitespace()
        guard index < bytes.count else { throw fail("unexpected end") }
        try countValue()
        switch bytes[index] {
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "["): return try array(depth: depth)
        case UInt8(ascii: "{"): return try object(depth: depth)
        default: return try number()
        }
    }

    /// At a container's opening byte: steps past it and answers true when the container is to be parsed; answers
    /// false when it lies `maxDepth` deep and `skipsTooDeep` skipped it whole (marking the parse `overflowed`);
    /// throws a `.depth` error when it lies that deep otherwise.
    @inline(__always)
    mutating func opensContainer(depth: Int) throws(JSONError) -> Bool {
        guard depth < maxDepth else {
            guard skipsTooDeep else {
                throw JSONError(offset: index, reason: "nested deeper than \(maxDepth)", bound: .depth)
            }
            try skipContainer()
            overflowed = true
            return false
        }
        index += 1
        return true
    }

    mutating func array(depth: Int) throws(JSONError) -> JSON {
        guard try opensContainer(depth: depth) else { return .null }
        if closesAtOnce(UInt8(ascii: "]")) { return .array([]) }
        var items: [JSON] = []
        repeat {
            items.append(try value(depth: depth + 1))
        } while try anotherFollows(before: UInt8(ascii: "]"))
        return .array(items)
    }

    mutating func object(depth: Int) throws(JSONError) -> JSON {
        guard try opensContainer(depth: depth) else { return .null }
        if closesAtOnce(UInt8(ascii: "}")) { return .object([]) }
        var members = Members()
        repeat {
            let key = try memberName()
            members.keep(key, try value(depth: depth + 1))
        } while try anotherFollows(before: UInt8(ascii: "}"))
        return .object(members.list)
    }

    /// An object's members as they are read. A repeated name keeps its first position and takes the last value;
    /// past `linearMemberScan` members, names are found through a dictionary instead of a scan.
    struct Members {
        var list: [(String, JSON)] = []
        var positions: [String: Int] = [:]

        @inline(__always)
        mutating func keep(_ key: String, _ value: JSON) {
            if list.count < JSONReader.linearMemberScan {
                if let i = list.firstIndex(where: { $0.0 == key }) {
                    list[i].1 = value
                } else {
                    list.append((key, value))
                }
                return
            }
            if positions.isEmpty {
                for (i, m) in list.enumerated() { positions[m.0] = i }
            }
            if let i = positions[key] {
                list[i].1 = value
            } else {
                positions[key] = list.count
                list.append((key, value))
            }
        }
    }

    /// At an object's member: its name, counted as a value, and the `:` after it.
    @inline(__always)
    mutating func memberName() throws(JSONError) -> String {
        skipWhitespace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected key") }
        try countValue()
        let key = try string()
        skipWhitespace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected :") }
        index += 1
        return key
    }

    /// Just past a `[` or a `{`: true, and past `close`, if the array or object is empty.
    @inline(__always)
    mutating func closesAtOnce(_ close: UInt8) -> Bool {
        skipWhitespace()
        guard index < bytes.count, bytes[index] == close else { return false }
        index += 1
        return true
    }

    /// After an array's element or an object's member: true past a `,` (another follows), false past `close`.
    @inline(__always)
    mutating func anotherFollows(before close: UInt8) throws(JSONError) -> Bool {
        skipWhitespace()
        guard index < bytes.count else {
            throw fail(close == UInt8(ascii: "]") ? "unterminated array" : "unterminated object")
        }
        if bytes[index] == UInt8(ascii: ",") {
            index += 1
            return true
        }
        guard bytes[index] == close else { throw fail("expected , or \(Character(Unicode.Scalar(close)))") }
        index += 1
        return false
    }

    mutating func literal(_ word: StaticString) throws(JSONError) {
        let n = word.utf8CodeUnitCount
        guard bytes.count - index >= n else { throw fail("unexpected end") }
        for i in 0..<n where bytes[index + i] != word.utf8Start[i] { throw fail("invalid literal") }
        index += n
    }

    func isDigit(at i: Int) -> Bool { i < bytes.count && bytes[i] >= 0x30 && bytes[i] <= 0x39 }

    /// RFC 8259's number grammar, strictly: no `+`, no leading zeros, digits on both sides of `.`.
    mutating func number() throws(JSONError) -> JSON {
        let start = index
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        guard isDigit(at: index) else { throw fail(negative ? "digit expected after -" : "invalid value") }
        var magnitude: UInt64 = 0
        var overflow = false
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if isDigit(at: index) { throw fail("leading zero") }
        } else {
            while isDigit(at: index) {
                let (times10, o1) = magnitude.multipliedReportingOverflow(by: 10)
                let (sum, o2) = times10.addingReportingOverflow(UInt64(bytes[index] - 0x30))
                if o1 || o2 { overflow = true } else { magnitude = sum }
                index += 1
            }
        }
        var integral = true
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            integral = false
            index += 1
            guard isDigit(at: index) else { throw fail("digit expected after .") }
            while isDigit(at: index) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            integral = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard isDigit(at: index) else { throw fail("digit expected in exponent") }
            while isDigit(at: index) { index += 1 }
        }
        if integral, !overflow {
            if !negative { return .integer(Int128(magnitude)) }
            // `-0` stays the double JavaScript reads; it equals and collates as 0.
            if magnitude == 0 { return .number(-0.0) }
            if magnitude <= UInt64(Int64.max) + 1 { return .integer(-Int128(magnitude)) }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        guard let d = Double(text) else { throw JSONError(offset: start, reason: "invalid number") }
        guard d.isFinite else {
            // Within a `_bulk_docs` element the document alone is refused (`JSONElement.outOfRange`).
            if skipsTooDeep {
                outOfRange = true
                return .null
            }
            throw JSONError(offset: start, reason: "number out of range")
        }
        return .number(d)
    }

    mutating func hex4() throws(JSONError) -> UInt32 {
        guard bytes.count - index >= 4 else { throw fail("short \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = bytes[index]
            index += 1
            v <<= 4
            switch c {
            case 0x30...0x39: v |= UInt32(c - 0x30)
            case 0x61...0x66: v |= UInt32(c - 0x61 + 10)
            case 0x41...0x46: v |= UInt32(c - 0x41 + 10)
            default: throw fail("bad \\u escape")
            }
        }
        return v
    }

    mutating func string() throws(JSONError) -> String {
        index += 1  // opening quote
        let start = index
        // Fast path: no escapes.
        while index < bytes.count {
            let c = bytes[index]
            if c == UInt8(ascii: "\"") {
                let s = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                index += 1
                return s
            }
            if c == UInt8(ascii: "\\") { break }
            if c < 0x20 { throw fail("control character in string") }
            index += 1
        }
        var out = Array(bytes[start..<index])
        while index < bytes.count {
            let c = bytes[index]
            index += 1
            switch c {
            case UInt8(ascii: "\""): return String(decoding: out, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard index < bytes.count else { throw fail("unterminated escape") }
                let e = bytes[index]
                index += 1
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"): try unicodeEscape(into: &out)
                default: throw fail("bad escape")
                }
            default:
                if c < 0x20 { throw fail("control character in string") }
                out.append(c)
            }
        }
        throw fail("unterminated string")
    }

    /// After `\u`: a scalar, a surrogate pair, or U+FFFD for an unpaired surrogate (the escape after an
    /// unpaired high surrogate is read on its own, not swallowed).
    mutating func unicodeEscape(into out: inout [UInt8]) throws(JSONError) {
        let code = try hex4()
        var scalar = Unicode.Scalar(code) ?? "\u{FFFD}"
        if (0xD800..<0xDC00).contains(code), bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"),
            bytes[index + 1] == UInt8(ascii: "u")
        {
            let escape = index
            index += 2
            let low = try hex4()
            if (0xDC00..<0xE000).contains(low),
                let pair = Unicode.Scalar(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00))
            {
                scalar = pair
            } else {
                index = escape
            }
        }
        UTF8.encode(scalar) { out.append($0) }
    }
}
