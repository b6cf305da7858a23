extension JSON {
    /// True when `bytes` are exactly one JSON text (RFC 8259: one value of any kind, whitespace around it) in
    /// well-formed UTF-8, without a byte order mark: the check the KV port makes on every value a client stores,
    /// to set or clear the JSON datatype bit itself, as kv_engine does (`docs/internals/storage-format.md`,
    /// "Datatype").
    ///
    /// A syntax check only, without building a value: no allocation below 64 levels of nesting, one bit per level
    /// above that, so a value of `n` bytes costs at most `n / 8` bytes however deep it nests; no recursion; every
    /// read is bounds-checked, so any bytes a client sends are safe. It accepts what the grammar accepts, which is
    /// more than `JSON.parse` takes: no depth, size or value-count bound (`Limits.maxJSONDepth` and the others
    /// bound a parse's tree, which this does not build) and numbers of any magnitude (`1e999`). Escapes are checked
    /// for their form; an unpaired surrogate escape (`"\ud800"`) is grammatical and accepted.
    ///
    /// Cost: strings are skipped eight bytes at a time while they hold only printable ASCII; everything else is
    /// one branch per byte. A value that is not JSON usually fails at its first byte.
    public static func isWellFormed(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let base = bytes.baseAddress else { return false }
        return WellFormedScan.run(base.assumingMemoryBound(to: UInt8.self), bytes.count)
    }

    /// Whether a text `JSON.parse` read was UTF-8 as sent: `parse` reads invalid UTF-8 as U+FFFD (ADR 0026), so a
    /// caller that must not alter what it stores (the gateway's request bodies and imports) asks this after it.
    /// An all-ASCII text is UTF-8 without a second scan; any other is scanned again (`isWellFormed`).
    public static func parsedTextIsUTF8(_ bytes: [UInt8]) -> Bool {
        !bytes.contains(where: { $0 >= 0x80 }) || bytes.withUnsafeBytes { isWellFormed($0) }
    }
}

/// The grammar of one `JSON.isWellFormed` check as a loop over "a value starts here" and "a value just ended", over
/// locals (`p`, `n`, `i`) the helpers update in place, so the position stays in a register. Every helper reads
/// `p[k]` only for `k < n`.
private enum WellFormedScan {
    static func run(_ p: UnsafePointer<UInt8>, _ n: Int) -> Bool {
        var i = 0
        var nesting = Nesting()
        while true {
            // A value starts at `i` (after whitespace).
            skipWhitespace(p, n, &i)
            guard i < n else { return false }
            let c = p[i]
            if c == UInt8(ascii: "{") || c == UInt8(ascii: "[") {
                let isObject = c == UInt8(ascii: "{")
                nesting.push(isObject)
                i += 1
                skipWhitespace(p, n, &i)
                guard i < n else { return false }
                if p[i] != (isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
                    if isObject, !memberName(p, n, &i) { return false }
                    continue
                }
                nesting.depth -= 1
                i += 1
            } else if !scalar(c, p, n, &i) {
                return false
            }
            // A value just ended: close containers until a comma asks for the next value.
            while true {
                skipWhitespace(p, n, &i)
                if nesting.depth == 0 { return i == n }
                guard i < n else { return false }
                let inObject = nesting.topIsObject
                let d = p[i]
                i += 1
                if d == UInt8(ascii: ",") {
                    if inObject, !memberName(p, n, &i) { return false }
                    break
                }
                guard d == (inObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) else { return false }
                nesting.depth -= 1
            }
        }
    }

    /// The kind of every open container as a bit stack: 1 an object, 0 an array.
    struct Nesting {
        /// Open containers.
        var depth = 0
        /// Kinds of the first 64 levels.
        var low: UInt64 = 0
        /// Kinds of the levels past 64, 64 to a word; allocated only for a value that nests that deep.
        var deep: [UInt64] = []

        @inline(__always)
        mutating func push(_ isObject: Bool) {
            let level = depth
            depth += 1
            let bit: UInt64 = 1 << UInt64(level & 63)
            if level < 64 {
                low = isObject ? low | bit : low & ~bit
                return
            }
            let word = (level - 64) >> 6
            if word == deep.count { deep.append(0) }
            deep[word] = isObject ? deep[word] | bit : deep[word] & ~bit
        }

        /// The innermost open container is an object (`depth` > 0).
        @inline(__always)
        var topIsObject: Bool {
            let level = depth - 1
            let bit: UInt64 = 1 << UInt64(level & 63)
            if level < 64 { return low & bit != 0 }
            return deep[(level - 64) >> 6] & bit != 0
        }
    }

    @inline(__always)
    static func skipWhitespace(_ p: UnsafePointer<UInt8>, _ n: Int, _ i: inout Int) {
        while i < n {
            switch p[i] {
            case 0x20, 0x09, 0x0A, 0x0D: i += 1
            default: return
            }
        }
    }

    /// After `{` or a comma in an object: whitespace, a string, whitespace, a colon.
    @inline(__always)
    static func memberName(_ p: UnsafePointer<UInt8>, _ n: Int, _ i: inout Int) -> Bool {
        skipWhitespace(p, n, &i)
        guard i < n, p[i] == UInt8(ascii: "\""), string(p, n, &i) else { return false }
        skipWhitespace(p, n, &i)
        guard i < n, p[i] == UInt8(ascii: ":") else { return false }
        i += 1
        return true
    }

    /// A string, number or literal starting with `c` at `i`.
    @inline(__always)
    static func scalar(_ c: UInt8, _ p: UnsafePointer<UInt8>, _ n: Int, _ i: inout Int) -> Bool {
        switch c {
        case UInt8(ascii: "\""): return string(p, n, &i)
        case UInt8(ascii: "t"): return literal(0x7472_7565, 4, p, n, &i)  // true
        case UInt8(ascii: "n"): return literal(0x6E75_6C6C, 4, p, n, &i)  // null
        case UInt8(ascii: "f"):  // false: "f" then "alse"
            i += 1
            return literal(0x616C_7365, 4, p, n, &i)
        default: return number(p, n, &i)
        }
    }

    /// The `count` (at most 8) bytes of `word`, most significant first, at `i`.
    @inline(__always)
    static func literal(_ word: UInt64, _ count: Int, _ p: UnsafePointer<UInt8>, _ n: Int, _ i: inout Int) -> Bool {
        guard n - i >= count else { return false }
        for k in 0..<count where p[i + k] != UInt8(truncatingIfNeeded: word >> UInt64(8 * (count - 1 - k))) {
            return false
        }
        i += count
        return true
    }

    @inline(__always)
    static func isDigit(_ c: UInt8) -> Bool { c &- 0x30 < 10 }

    @inline(__always)
    static func digits(_ p: UnsafePointer<UInt8>, _ n: Int, _ i: inout Int) -> Bool {
        let start = i
        while i < n, isDigit(p[i]) { i += 1 }
        return i > start
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    static func number(_ p: UnsafePointer<UInt8>, _ n: Int, _ i: inout Int) -> Bool {
        if p[i] == UInt8(ascii: "-") { i += 1 }
        guard i < n else { return false }
        if p[i] == UInt8(ascii: "0") {
            i += 1
        } else if !digits(p, n, &i) {
            return false
        }
        if i < n, p[i] == UInt8(ascii: ".") {
            i += 1
            guard digits(p, n, &i) else { return false }
        }
        if i < n, p[i] | 0x20 == UInt8(ascii: "e") {
            i += 1
            if i < n, p[i] == UInt8(ascii: "+") || p[i] == UInt8(ascii: "-") { i += 1 }
            guard digits(p, n, &i) else { return false }
        }
        return true
    }

    /// Flags (0x80) the bytes of `w` that end a run of plain string text: a quote, a backslash, a control character
    /// or a byte above 0x7F. The lowest flagged byte is exact (the borrow of the subtractions only ever flags bytes
    /// above a flagged one), which is all the string scan uses.
    @inline(__always)
    static func stopBytes(_ w: UInt64) -> UInt64 {
        let high: UInt64 = 0x8080_8080_8080_8080
        let ones: UInt64 = 0x0101_0101_0101_0101
        let control = (w &- 0x2020_2020_2020_2020) & ~w
        let q = w ^ 0x2222_2222_2222_2222
        let quote = (q &- ones) & ~q
        let b = w ^ 0x5C5C_5C5C_5C5C_5C5C
        let backslash = (b &- ones) & ~b
        return (control | quote | backslash | w) & high
    }

    /// The string whose opening quote is at `i`; `i` ends past its closing quote.
    static func string(_ p: UnsafePointer<UInt8>, _ n: Int, _ i: inout Int) -> Bool {
        i += 1
        while true {
            // Eight bytes at a time up to the first byte that is not plain text.
            while n - i >= 8 {
                let stops = stopBytes(UnsafeRawPointer(p + i).loadUnaligned(as: UInt64.self).littleEndian)
                if stops == 0 {
                    i += 8
                    continue
                }
                i += stops.trailingZeroBitCount >> 3
                break
            }
            guard i < n else { return false }
            switch p[i] {
            case UInt8(ascii: "\""):
                i += 1
                return true
            case UInt8(ascii: "\\"):
                guard n - i >= 2 else { return false }
                switch p[i + 1] {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                    UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    i += 2
                case UInt8(ascii: "u"):
                    guard n - i >= 6 else { return false }
                    for k in (i + 2)..<(i + 6) where !isHexDigit(p[k]) { return false }
                    i += 6
                default:
                    return false
                }
            case 0..<0x20:
                return false
            case 0x20..<0x80:
                i += 1
            default:
                guard utf8Sequence(p, n, &i) else { return false }
            }
        }
    }

    @inline(__always)
    static func isHexDigit(_ c: UInt8) -> Bool { isDigit(c) || (c | 0x20) &- 0x61 < 6 }

    /// The well-formed UTF-8 sequence whose lead byte (0x80 or above) is at `i` (Unicode's table 3-7: no overlong
    /// forms, no surrogates, nothing above U+10FFFF); `i` ends past it.
    static func utf8Sequence(_ p: UnsafePointer<UInt8>, _ n: Int, _ i: inout Int) -> Bool {
        let lead = p[i]
        let count: Int
        // The second byte's range; the others are 0x80...0xBF.
        var low: UInt8 = 0x80
        var high: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: count = 2
        case 0xE0:
            count = 3
            low = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: count = 3
        case 0xED:
            count = 3
            high = 0x9F
        case 0xF0:
            count = 4
            low = 0x90
        case 0xF1...0xF3: count = 4
        case 0xF4:
            count = 4
            high = 0x8F
        default: return false
        }
        guard n - i >= count, p[i + 1] >= low, p[i + 1] <= high else { return false }
        for k in 2..<count where p[i + k] & 0xC0 != 0x80 { return false }
        i += count
        return true
    }
}
