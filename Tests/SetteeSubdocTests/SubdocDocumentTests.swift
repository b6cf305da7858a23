import SetteeCore
import Testing

@testable import SetteeSubdoc

private func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

/// The document every case starts from: odd spacing and a member order that a re-serialiser would lose.
private let sample = #"{ "a": {"b": [1, 2, {"c": "x"}]}, "n": 5, "dot.ted": true, "back`tick": 1 }"#

private func mutated(
    _ document: String, _ command: SubdocCommand, _ path: String, _ value: String = "", mkdirP: Bool = false
) throws -> (document: String, result: String) {
    var doc = try SubdocDocument(validating: Array(document.utf8))
    let result = try doc.mutate(
        command, path: try SubdocPath.parse(Array(path.utf8)), value: Array(value.utf8), createParents: mkdirP)
    return (text(doc.bytes), text(result))
}

private func lookedUp(_ document: String, _ command: SubdocCommand, _ path: String) throws -> String {
    let doc = try SubdocDocument(validating: Array(document.utf8))
    return text(try doc.lookup(command, path: try SubdocPath.parse(Array(path.utf8))))
}

/// The editor works on the document's bytes: lookups return the stored bytes of a value, and mutations
/// change only the edited range (spacing and order elsewhere survive), with kv_engine's per-path statuses.
@Suite struct SubdocDocumentTests {
    /// Proves a lookup walks down a path scanning the document about once, not once per level: 16 paths 29 keys
    /// (then positions) deep into a document whose innermost value is a 4 MiB string. Each level collected every
    /// child's range, which scanned the rest of the path again at every level (31 times the document per path:
    /// 1.9 s per path on a 20 MiB one in a release build, on the event loop). The answers are the string, and a
    /// missing key at the last level is still PATH_ENOENT. The bound is loose: a debug build, a loaded machine.
    @Test func aDeepPathScansTheDocumentOnce() throws {
        let depth = Limits.subdocMaxDocumentDepth - 3  // the siblings nest two deeper
        let big = "\"" + String(repeating: "x", count: 4 * 1024 * 1024) + "\""
        let keys =
            String(repeating: #"{"z":[1,{"q":2}],"a":"#, count: depth) + big + String(repeating: "}", count: depth)
        let doc = try SubdocDocument(validating: Array(keys.utf8))
        let path = try SubdocPath.parse(Array(Array(repeating: "a", count: depth).joined(separator: ".").utf8))
        let clock = ContinuousClock()
        let start = clock.now
        for _ in 0..<16 { #expect(try doc.lookup(.get, path: path).count == big.utf8.count) }
        let missing = try SubdocPath.parse(
            Array((Array(repeating: "a", count: depth - 1) + ["b"]).joined(separator: ".").utf8))
        #expect(throws: SubdocError.pathNotFound) { try doc.lookup(.get, path: missing) }
        let arrays = String(repeating: "[0,", count: depth) + big + String(repeating: "]", count: depth)
        let arrayDoc = try SubdocDocument(validating: Array(arrays.utf8))
        let positions = try SubdocPath.parse(Array(String(repeating: "[1]", count: depth).utf8))
        for _ in 0..<16 { #expect(try arrayDoc.lookup(.get, path: positions).count == big.utf8.count) }
        let elapsed = clock.now - start
        #expect(elapsed < .seconds(30), "32 deep lookups took \(elapsed)")
    }

    /// Proves a run of `[-1]` is resolved in one pass: 16 paths of 29 `[-1]` into arrays whose last elements hold a
    /// 4 MiB string. Each `[-1]` collected its array's children, the last one's whole subtree included, so a chain
    /// scanned the document once per level (as `aDeepPathScansTheDocumentOnce`'s keys did). The answers are the
    /// string, through the chain's every shape: a run after a key, a key after a run, and a position inside one.
    @Test func aChainOfLastElementsScansTheDocumentOnce() throws {
        let depth = Limits.subdocMaxDocumentDepth - 3
        let big = "\"" + String(repeating: "x", count: 4 * 1024 * 1024) + "\""
        let arrays = String(repeating: "[0,[1],", count: depth) + big + String(repeating: "]", count: depth)
        let doc = try SubdocDocument(validating: Array(arrays.utf8))
        let chain = try SubdocPath.parse(Array(String(repeating: "[-1]", count: depth).utf8))
        let clock = ContinuousClock()
        let start = clock.now
        for _ in 0..<16 { #expect(try doc.lookup(.get, path: chain).count == big.utf8.count) }
        let elapsed = clock.now - start
        #expect(elapsed < .seconds(30), "16 chains of \(depth) [-1] took \(elapsed)")
        let inner = try SubdocPath.parse(Array((String(repeating: "[-1]", count: depth - 1) + "[1][0]").utf8))
        #expect(text(try doc.lookup(.get, path: inner)) == "1")
    }

    /// A run of `[-1]` answers as one `[-1]` at a time did: missing at an empty array, a mismatch where a last
    /// element is not an array, and keys on either side of the run.
    @Test(arguments: [
        (#"[[1,[2,3]],[4,[5,[6,7]]]]"#, "[-1][-1][-1][-1]", "7"),
        (#"[[1,[2,3]],[4,[5,[6,7]]]]"#, "[-1][-1][0]", "5"),
        (#"[[1,[2,3]],[4,[5,[6,7]]]]"#, "[0][-1][-1]", "3"),
        (#"{"a":[{"b":[1,{"c":[8,9]}]}]}"#, "a[-1].b[-1].c[-1]", "9"),
        (#"{"a":[[[1],[{"k":"v"}]]]}"#, "a[-1][-1][-1].k", #""v""#),
        (#"{"a":[[0,[1,2]],[3]]}"#, "a[-1][-1]", "3"),
    ])
    func lastElementChains(document: String, path: String, expected: String) throws {
        #expect(try lookedUp(document, .get, path) == expected)
    }

    @Test(arguments: [
        (#"[[1,[2,3]],[]]"#, "[-1][-1]", SubdocError.pathNotFound),
        (#"[[1,[2,3]],[[]]]"#, "[-1][-1][-1]", .pathNotFound),
        (#"[[[1,2]],4]"#, "[-1][-1]", .pathMismatch),
        (#"[[[1,2]],[{"a":1}]]"#, "[-1][-1][-1]", .pathMismatch),
        (#"[[[1,2]],[3,[4]],5]"#, "[-1][-1][-1]", .pathMismatch),
        (#"{"a":[]}"#, "a[-1][-1]", .pathNotFound),
        (#"{"a":{}}"#, "a[-1]", .pathMismatch),
    ])
    func lastElementChainErrors(document: String, path: String, error: SubdocError) {
        #expect(throws: error) { try lookedUp(document, .get, path) }
    }

    @Test func mutationsThroughALastElementChain() throws {
        let document = #"{"a":[[1,[2,3]],[4,[5,6]]]}"#
        #expect(try mutated(document, .replace, "a[-1][-1][-1]", "7").document == #"{"a":[[1,[2,3]],[4,[5,7]]]}"#)
        #expect(try mutated(document, .delete, "a[-1][-1]", "").document == #"{"a":[[1,[2,3]],[4]]}"#)
        #expect(
            try mutated(document, .arrayPushLast, "a[-1][-1]", "0").document == #"{"a":[[1,[2,3]],[4,[5,6,0]]]}"#)
    }

    @Test(arguments: [
        (SubdocCommand.get, "a.b[2].c", #""x""#),
        (.get, "a.b[-1]", #"{"c": "x"}"#),
        (.get, "`dot.ted`", "true"),
        (.get, "`back``tick`", "1"),
        (.exists, "n", ""),
        (.getCount, "a.b", "3"),
        (.getCount, "", "4"),
    ])
    func lookups(command: SubdocCommand, path: String, expected: String) throws {
        #expect(try lookedUp(sample, command, path) == expected)
    }

    @Test(arguments: [
        (SubdocCommand.get, "a.x", SubdocError.pathNotFound),
        (.get, "a.b[3]", .pathNotFound),
        (.get, "n.x", .pathMismatch),
        (.get, "a.b.c", .pathMismatch),
        (.get, "a[0]", .pathMismatch),
        (.get, "", .pathInvalid),
        (.exists, "zz", .pathNotFound),
        (.getCount, "n", .pathMismatch),
    ])
    func lookupErrors(command: SubdocCommand, path: String, error: SubdocError) {
        #expect(throws: error) { try lookedUp(sample, command, path) }
    }

    /// Every mutation command, spliced into a small document; the untouched bytes are identical.
    @Test(arguments: [
        (SubdocCommand.dictAdd, "a.z", #"{"q":1}"#, false, #"{ "a": {"b": [1, 2],"z":{"q":1}}, "n": 5 }"#, ""),
        (.dictUpsert, "n", " 7 ", false, #"{ "a": {"b": [1, 2]}, "n": 7 }"#, ""),
        (.dictUpsert, "x.y.z", "1", true, #"{ "a": {"b": [1, 2]}, "n": 5,"x":{"y":{"z":1}} }"#, ""),
        (.delete, "a.b[0]", "", false, #"{ "a": {"b": [2]}, "n": 5 }"#, ""),
        (.delete, "a.b[-1]", "", false, #"{ "a": {"b": [1]}, "n": 5 }"#, ""),
        (.delete, "a", "", false, #"{ "n": 5 }"#, ""),
        (.delete, "n", "", false, #"{ "a": {"b": [1, 2]} }"#, ""),
        (.replace, "a.b[1]", #""two""#, false, #"{ "a": {"b": [1, "two"]}, "n": 5 }"#, ""),
        (.arrayPushLast, "a.b", "3,4", false, #"{ "a": {"b": [1, 2,3,4]}, "n": 5 }"#, ""),
        (.arrayPushFirst, "a.b", "0", false, #"{ "a": {"b": [0,1, 2]}, "n": 5 }"#, ""),
        (.arrayPushFirst, "q", "0", true, #"{ "a": {"b": [1, 2]}, "n": 5,"q":[0] }"#, ""),
        (.arrayInsert, "a.b[1]", "9", false, #"{ "a": {"b": [1, 9,2]}, "n": 5 }"#, ""),
        (.arrayInsert, "a.b[2]", "9", false, #"{ "a": {"b": [1, 2,9]}, "n": 5 }"#, ""),
        (.arrayAddUnique, "a.b", "3", false, #"{ "a": {"b": [1, 2,3]}, "n": 5 }"#, ""),
        (.counter, "n", "-7", false, #"{ "a": {"b": [1, 2]}, "n": -2 }"#, "-2"),
        (.counter, "m", "3", false, #"{ "a": {"b": [1, 2]}, "n": 5,"m":3 }"#, "3"),
        (.counter, "p.q", "3", true, #"{ "a": {"b": [1, 2]}, "n": 5,"p":{"q":3} }"#, "3"),
    ])
    func mutations(
        command: SubdocCommand, path: String, value: String, mkdirP: Bool, expected: String, result: String
    ) throws {
        let (document, returned) = try mutated(#"{ "a": {"b": [1, 2]}, "n": 5 }"#, command, path, value, mkdirP: mkdirP)
        #expect(document == expected)
        #expect(returned == result)
    }

    @Test(arguments: [
        (#"{"a":1}"#, SubdocCommand.delete, "a", "", #"{}"#),
        (#"[]"#, .arrayPushLast, "", "1", "[1]"),
        (#"[1]"#, .arrayPushFirst, "", "0", "[0,1]"),
        (#"{"l":[1,"x"]}"#, .arrayAddUnique, "l", #""y""#, #"{"l":[1,"x","y"]}"#),
        (#"{"l":[]}"#, .arrayInsert, "l[0]", "1", #"{"l":[1]}"#),
        (#"{ }"#, .dictAdd, #"k\"q"#, "1", #"{"k\"q":1}"#),
    ])
    func edgeMutations(document: String, command: SubdocCommand, path: String, value: String, expected: String)
        throws
    {
        #expect(try mutated(document, command, path, value).document == expected)
    }

    /// Each per-path failure, with the status code kv_engine gives it.
    @Test(arguments: [
        (sample, SubdocCommand.dictAdd, "n", "1", SubdocError.pathExists),
        (sample, .dictAdd, "a.b[0]", "1", .pathInvalid),
        (sample, .dictAdd, "", "1", .pathInvalid),
        (sample, .dictUpsert, "x.y.z", "1", .pathNotFound),
        (sample, .dictUpsert, "n.x", "1", .pathMismatch),
        (sample, .dictUpsert, "k", "{bad", .valueCannotInsert),
        (sample, .dictUpsert, "k", "1.", .valueCannotInsert),
        (sample, .dictUpsert, "k", "", .valueCannotInsert),
        (sample, .dictUpsert, "k", "1,2", .valueCannotInsert),
        (sample, .delete, "zz", "", .pathNotFound),
        (sample, .replace, "zz", "1", .pathNotFound),
        (sample, .replace, "", "1", .pathInvalid),
        (sample, .arrayPushLast, "n", "1", .pathMismatch),
        (sample, .arrayPushLast, "zz", "1", .pathNotFound),
        (sample, .arrayPushLast, "a.b", "", .valueCannotInsert),
        (sample, .arrayInsert, "a.b[4]", "9", .pathNotFound),
        (sample, .arrayInsert, "a.b[-1]", "9", .pathInvalid),
        (sample, .arrayInsert, "a.b", "9", .pathInvalid),
        (sample, .arrayAddUnique, "a.b", "2", .pathMismatch),
        (#"{"l":[1,2]}"#, .arrayAddUnique, "l", "2", .pathExists),
        (#"{"l":[1,2]}"#, .arrayAddUnique, "l", "[3]", .valueCannotInsert),
        (sample, .counter, "n", "0", .deltaInvalid),
        (sample, .counter, "n", "x", .deltaInvalid),
        (sample, .counter, "n", "1.5", .deltaInvalid),
        (sample, .counter, "n", "99999999999999999999", .deltaInvalid),
        (sample, .counter, "p.q", "3", .pathNotFound),
        (sample, .counter, "zz.q", "1", .pathNotFound),
        (sample, .counter, "`dot.ted`", "1", .pathMismatch),
        (#"{"n":1.5}"#, .counter, "n", "1", .pathMismatch),
        (#"{"n":92233720368547758070}"#, .counter, "n", "1", .numberOutOfRange),
        (#"{"n":9223372036854775807}"#, .counter, "n", "1", .valueCannotInsert),
        (#"{"n":-9223372036854775808}"#, .counter, "n", "-1", .valueCannotInsert),
        (sample, .dictUpsert, "k\"", "1", .pathInvalid),
    ])
    func mutationErrors(document: String, command: SubdocCommand, path: String, value: String, error: SubdocError) {
        #expect(throws: error) { try mutated(document, command, path, value) }
    }

    /// Documents that are not JSON are DOC_NOTJSON; ones nested deeper than the limit DOC_E2DEEP; a value
    /// that would push the document past the limit VALUE_ETOODEEP.
    @Test func documentShapeErrors() {
        for bad in ["{nope", "", "{\"a\":1} x", "{\"a\":01}", "{\"a\":\"\u{01}\"}", "[1,]", "{\"a\" 1}"] {
            #expect(throws: SubdocError.documentNotJSON) { try SubdocDocument(validating: Array(bad.utf8)) }
        }
        let limit = Limits.subdocMaxDocumentDepth
        let deep = String(repeating: "[", count: limit + 1) + String(repeating: "]", count: limit + 1)
        #expect(throws: SubdocError.documentTooDeep) { try SubdocDocument(validating: Array(deep.utf8)) }
        let atLimit = String(repeating: "[", count: limit) + String(repeating: "]", count: limit)
        #expect(throws: Never.self) { try SubdocDocument(validating: Array(atLimit.utf8)) }
        let nested = String(repeating: "[", count: limit) + String(repeating: "]", count: limit)
        #expect(throws: SubdocError.valueTooDeep) { try mutated("{}", .dictAdd, "k", nested) }
        let fits = String(repeating: "[", count: limit - 1) + String(repeating: "]", count: limit - 1)
        #expect(throws: Never.self) { try mutated("{}", .dictAdd, "k", fits) }
    }

    /// A creating mutation on a missing document starts from `{}`, or `[]` for an array command on the root
    /// or a path that opens with an index.
    @Test func emptyRoots() throws {
        let dictPath = try SubdocPath.parse(Array("a".utf8))
        #expect(SubdocDocument.emptyRoot(for: .dictUpsert, path: dictPath).bytes == Array("{}".utf8))
        #expect(
            SubdocDocument.emptyRoot(for: .arrayPushLast, path: SubdocPath(components: [])).bytes == Array("[]".utf8))
        #expect(SubdocDocument.emptyRoot(for: .arrayPushLast, path: dictPath).bytes == Array("{}".utf8))
    }
}
