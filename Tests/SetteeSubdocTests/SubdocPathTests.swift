import SetteeCore
import Testing

@testable import SetteeSubdoc

private func key(_ s: String) -> SubdocPathComponent { .key(Array(s.utf8)) }

/// The path parser accepts Couchbase's N1QL-style syntax and refuses everything else with the status
/// kv_engine gives (PATH_EINVAL, PATH_E2BIG), so a client sees the same answer from Settee as from Couchbase.
@Suite struct SubdocPathTests {
    /// Each accepted spelling parses to the components it names.
    @Test(arguments: [
        ("", [SubdocPathComponent]()),
        ("a", [key("a")]),
        ("a.b[0].c", [key("a"), key("b"), .index(0), key("c")]),
        ("a[-1]", [key("a"), .index(-1)]),
        ("[2][3]", [.index(2), .index(3)]),
        ("`dot.ted.field`.sub", [key("dot.ted.field"), key("sub")]),
        ("`back``tick``field`", [key("back`tick`field")]),
        ("`a[0]`[1]", [key("a[0]"), .index(1)]),
        (#"field.with.\"quotes\""#, [key("field"), key("with"), key(#"\"quotes\""#)]),
    ])
    func parses(path: String, expected: [SubdocPathComponent]) throws {
        #expect(try SubdocPath.parse(Array(path.utf8)).components == expected)
    }

    /// Malformed paths are PATH_EINVAL: empty components, unbalanced brackets or backticks, indexes that
    /// are not numbers, negative indexes other than -1, a name glued to a closing bracket.
    @Test(arguments: [
        "a..b", ".a", "a.", "a[", "a[]", "a[x]", "a[-2]", "a[0", "a]", "a[0]b", "`unclosed", "a.[0]", "``",
        "a[1234567890123456789]",
    ])
    func refusesMalformed(path: String) {
        #expect(throws: SubdocError.pathInvalid) { try SubdocPath.parse(Array(path.utf8)) }
    }

    /// Paths longer than 1024 bytes or with more than 32 components are PATH_E2BIG.
    @Test func refusesTooBig() {
        let long = [UInt8](repeating: UInt8(ascii: "a"), count: Limits.subdocMaxPathLength + 1)
        #expect(throws: SubdocError.pathTooBig) { try SubdocPath.parse(long) }
        let deep = Array((0...Limits.subdocMaxPathComponents).map { _ in "a" }.joined(separator: ".").utf8)
        #expect(throws: SubdocError.pathTooBig) { try SubdocPath.parse(deep) }
        let limit = Array((1...Limits.subdocMaxPathComponents).map { _ in "a" }.joined(separator: ".").utf8)
        #expect(throws: Never.self) { try SubdocPath.parse(limit) }
    }

    /// With the XATTR flag the first component is the attribute name, taken literally (backticks included),
    /// and the rest is an ordinary body path; an empty xattr path is invalid.
    @Test func xattrPaths() throws {
        #expect(
            try SubdocPath.parse(Array("_sync.rev".utf8), xattr: true).components == [key("_sync"), key("rev")])
        #expect(try SubdocPath.parse(Array("`x`[0]".utf8), xattr: true).components == [key("`x`"), .index(0)])
        #expect(throws: SubdocError.pathInvalid) { try SubdocPath.parse([], xattr: true) }
    }
}
