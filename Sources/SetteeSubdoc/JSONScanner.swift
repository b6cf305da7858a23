import SetteeCore

/// One member of an object or element of an array, as byte offsets into the document.
struct JSONChild {
    /// Where the member starts: its key's opening quote (objects) or its value (arrays).
    var start: Int
    /// The key's bytes between the quotes, escapes kept (objects only).
    var key: Range<Int>?
    var valueStart: Int
    /// One past the value's last byte.
    var valueEnd: Int
}

/// A validating scanner over JSON bytes that finds values' byte ranges without building values: the
/// sub-document editor splices at these offsets and leaves every other byte as it was.
///
/// Every read is bounds-checked (the bytes may be anything a client stored); nesting is limited to
/// `Limits.subdocMaxDocumentDepth`, which also bounds the recursion.
struct JSONScanner {
    let bytes: [UInt8]

    func skipWhitespace(_ from: Int) -> Int {
        var i = from
        while i < bytes.count {
            switch bytes[i] {
            case 0x20, 0x09, 0x0A, 0x0D: i += 1
            default: return i
            }
        }
        return i
    }

    /// Checks the whole input is one JSON value (whitespace around it allowed), no deeper than the limit.
    func validate() throws(SubdocError) {
        let start = skipWhitespace(0)
        let end = try valueEnd(at: start, depth: 0)
        guard skipWhitespace(end) == bytes.count else { throw .documentNotJSON }
    }

    /// The end (exclusive) of the value starting at `i`. `depth` counts the containers around it.
    func valueEnd(at i: Int, depth: Int) throws(SubdocError) -> Int {
        guard i < bytes.count else { throw .documentNotJSON }
        switch bytes[i] {
        case Ascii.quote:
            return try stringEnd(at: i)
        case Ascii.openBrace, Ascii.openBracket:
            guard depth < Limits.subdocMaxDocumentDepth else { throw .documentTooDeep }
            return try containerEnd(at: i, depth: depth)
        case UInt8(ascii: "t"): return try literalEnd(at: i, "true")
        case UInt8(ascii: "f"): return try literalEnd(at: i, "false")
        case UInt8(ascii: "n"): return try literalEnd(at: i, "null")
        default: return try numberEnd(at: i)
        }
    }

    private func literalEnd(at i: Int, _ word: StaticString) throws(SubdocError) -> Int {
        let n = word.utf8CodeUnitCount
        guard i + n <= bytes.count else { throw .documentNotJSON }
        for k in 0..<n where bytes[i + k] != word.utf8Start[k] { throw .documentNotJSON }
        return i + n
    }

    /// JSON number grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    private func numberEnd(at start: Int) throws(SubdocError) -> Int {
        var i = start
        if i < bytes.count, bytes[i] == Ascii.minus { i += 1 }
        let intStart = i
        i = digitsEnd(i)
        guard i > intStart else { throw .documentNotJSON }
        if bytes[intStart] == Ascii.zero && i - intStart > 1 { throw .documentNotJSON }
        if i < bytes.count, bytes[i] == Ascii.dot {
            let f = i + 1
            i = digitsEnd(f)
            guard i > f else { throw .documentNotJSON }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
            i += 1
            if i < bytes.count, bytes[i] == Ascii.plus || bytes[i] == Ascii.minus { i += 1 }
            let e = i
            i = digitsEnd(e)
            guard i > e else { throw .documentNotJSON }
        }
        return i
    }

    private func digitsEnd(_ from: Int) -> Int {
        var i = from
        while i < bytes.count, bytes[i] >= Ascii.zero, bytes[i] <= Ascii.nine { i += 1 }
        return i
    }

    /// The end (exclusive) of the string whose opening quote is at `i`.
    func stringEnd(at start: Int) throws(SubdocError) -> Int {
        var i = start + 1
        while i < bytes.count {
            let c = bytes[i]
            switch c {
            case Ascii.quote:
                return i + 1
            case Ascii.backslash:
                guard i + 1 < bytes.count else { throw .documentNotJSON }
                switch bytes[i + 1] {
                case Ascii.quote, Ascii.backslash, UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                    UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    i += 2
                case UInt8(ascii: "u"):
                    guard i + 6 <= bytes.count else { throw .documentNotJSON }
                    for k in (i + 2)..<(i + 6) where !Self.isHexDigit(bytes[k]) { throw .documentNotJSON }
                    i += 6
                default:
                    throw .documentNotJSON
                }
            case 0..<0x20:
                throw .documentNotJSON
            default:
                i += 1
            }
        }
        throw .documentNotJSON
    }

    static func isHexDigit(_ c: UInt8) -> Bool {
        (c >= Ascii.zero && c <= Ascii.nine) || (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "f"))
            || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "F"))
    }

    /// The members (or elements) of the object (or array) whose opening bracket is at `open`, and the
    /// offset of its closing bracket.
    func children(ofContainerAt open: Int, depth: Int) throws(SubdocError) -> (children: [JSONChild], close: Int) {
        guard open < bytes.count else { throw .documentNotJSON }
        let isObject = bytes[open] == Ascii.openBrace
        let closer = isObject ? Ascii.closeBrace : Ascii.closeBracket
        var result: [JSONChild] = []
        var i = skipWhitespace(open + 1)
        guard i < bytes.count else { throw .documentNotJSON }
        if bytes[i] == closer { return (result, i) }
        while true {
            let start = i
            var key: Range<Int>?
            if isObject {
                guard i < bytes.count, bytes[i] == Ascii.quote else { throw .documentNotJSON }
                let keyEnd = try stringEnd(at: i)
                key = (i + 1)..<(keyEnd - 1)
                i = skipWhitespace(keyEnd)
                guard i < bytes.count, bytes[i] == Ascii.colon else { throw .documentNotJSON }
                i = skipWhitespace(i + 1)
            }
            let valueStart = i
            let valueEnd = try valueEnd(at: i, depth: depth + 1)
            result.append(JSONChild(start: start, key: key, valueStart: valueStart, valueEnd: valueEnd))
            i = skipWhitespace(valueEnd)
            guard i < bytes.count else { throw .documentNotJSON }
            if bytes[i] == closer { return (result, i) }
            guard bytes[i] == Ascii.comma else { throw .documentNotJSON }
            i = skipWhitespace(i + 1)
        }
    }

    /// Where the value of the first member named `name` of the object opening at `open` starts; nil when it has
    /// none. Only the members before it are skipped; its value and the members after it are not scanned (the
    /// document was validated whole before any walk).
    func memberValueStart(ofObjectAt open: Int, named name: [UInt8], depth: Int) throws(SubdocError) -> Int? {
        var i = skipWhitespace(open + 1)
        guard i < bytes.count else { throw .documentNotJSON }
        if bytes[i] == Ascii.closeBrace { return nil }
        while true {
            guard i < bytes.count, bytes[i] == Ascii.quote else { throw .documentNotJSON }
            let keyEnd = try stringEnd(at: i)
            let key = (i + 1)..<(keyEnd - 1)
            i = skipWhitespace(keyEnd)
            guard i < bytes.count, bytes[i] == Ascii.colon else { throw .documentNotJSON }
            i = skipWhitespace(i + 1)
            if equals(key, name) { return i }
            i = skipWhitespace(try valueEnd(at: i, depth: depth + 1))
            guard i < bytes.count else { throw .documentNotJSON }
            if bytes[i] == Ascii.closeBrace { return nil }
            guard bytes[i] == Ascii.comma else { throw .documentNotJSON }
            i = skipWhitespace(i + 1)
        }
    }

    /// Where element `index` (from 0) of the array opening at `open` starts; nil when it has fewer. Only the
    /// elements before it are skipped.
    func elementStart(ofArrayAt open: Int, index: Int, depth: Int) throws(SubdocError) -> Int? {
        var i = skipWhitespace(open + 1)
        guard i < bytes.count else { throw .documentNotJSON }
        if bytes[i] == Ascii.closeBracket { return nil }
        var n = 0
        while n < index {
            i = skipWhitespace(try valueEnd(at: i, depth: depth + 1))
            guard i < bytes.count else { throw .documentNotJSON }
            if bytes[i] == Ascii.closeBracket { return nil }
            guard bytes[i] == Ascii.comma else { throw .documentNotJSON }
            i = skipWhitespace(i + 1)
            n += 1
        }
        return i
    }

    /// The starts of the last elements down a chain of arrays, for a run of `[-1]` in a path: `starts[level]` is
    /// where the last element of the array opening at `open` starts, `starts[level + 1]` that element's last
    /// element when it is an array, and so on to `starts.count - 1`; -1 where that array is empty. Returns the end
    /// (exclusive) of the array at `open`.
    ///
    /// One pass: a last element is found only by skipping it too (to see the `]` after it), so looking the levels up
    /// one at a time scanned the chain's subtree once per `[-1]` (up to 32 times a 20 MiB document per path). Here
    /// each array element is skipped once, and the last array element of each level is walked into as it is
    /// skipped. An entry below a level whose last element is not an array is left from an earlier sibling: the walk
    /// checks each level is an array before it reads the next.
    func lastElements(
        ofArrayAt open: Int, depth: Int, into starts: inout [Int], level: Int = 0
    ) throws(SubdocError) -> Int {
        var i = skipWhitespace(open + 1)
        guard i < bytes.count else { throw .documentNotJSON }
        starts[level] = -1
        if bytes[i] == Ascii.closeBracket { return i + 1 }
        while true {
            starts[level] = i
            let end: Int
            if level + 1 < starts.count, bytes[i] == Ascii.openBracket {
                guard depth + 1 < Limits.subdocMaxDocumentDepth else { throw .documentTooDeep }
                end = try lastElements(ofArrayAt: i, depth: depth + 1, into: &starts, level: level + 1)
            } else {
                end = try valueEnd(at: i, depth: depth + 1)
            }
            i = skipWhitespace(end)
            guard i < bytes.count else { throw .documentNotJSON }
            if bytes[i] == Ascii.closeBracket { return i + 1 }
            guard bytes[i] == Ascii.comma else { throw .documentNotJSON }
            i = skipWhitespace(i + 1)
        }
    }

    /// The end (exclusive) of the object or array opening at `open`: the same checks as `children`, without
    /// collecting them (skipping a sibling or validating allocates nothing).
    func containerEnd(at open: Int, depth: Int) throws(SubdocError) -> Int {
        let isObject = bytes[open] == Ascii.openBrace
        let closer = isObject ? Ascii.closeBrace : Ascii.closeBracket
        var i = skipWhitespace(open + 1)
        guard i < bytes.count else { throw .documentNotJSON }
        if bytes[i] == closer { return i + 1 }
        while true {
            if isObject {
                guard i < bytes.count, bytes[i] == Ascii.quote else { throw .documentNotJSON }
                i = skipWhitespace(try stringEnd(at: i))
                guard i < bytes.count, bytes[i] == Ascii.colon else { throw .documentNotJSON }
                i = skipWhitespace(i + 1)
            }
            i = skipWhitespace(try valueEnd(at: i, depth: depth + 1))
            guard i < bytes.count else { throw .documentNotJSON }
            if bytes[i] == closer { return i + 1 }
            guard bytes[i] == Ascii.comma else { throw .documentNotJSON }
            i = skipWhitespace(i + 1)
        }
    }

    /// Whether `bytes[range]` equals `other`.
    func equals(_ range: Range<Int>, _ other: [UInt8]) -> Bool {
        guard range.count == other.count else { return false }
        var k = 0
        for i in range {
            if bytes[i] != other[k] { return false }
            k += 1
        }
        return true
    }
}
