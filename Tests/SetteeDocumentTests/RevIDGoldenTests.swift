import SetteeDocument
import SetteeJSON
import Testing

/// Revision ids every peer must compute alike (CouchDB / Couchbase Lite compatible), pinned. The expected
/// digests were computed outside Swift (Python: `hashlib.md5(parent + b"\0" + deleted + canonical JSON)`, members
/// sorted by UTF-8 bytes, `_` members other than `_attachments` left out at the top level) and agree with the
/// two digests pinned before (`RevTreeStorageTests.revisionDigestsAreKnownValues`).
@Suite struct RevIDGoldenTests {
    static let cases: [(parent: String?, deleted: Bool, body: String, digest: String)] = [
        // Members out of order at the top level (the benchmark's shape).
        (
            nil, false, #"{"type":"note","n":3,"title":"note 3","done":false,"text":"lorem ipsum "}"#,
            "4d6ee688b49710557aea6ba22ea9f61f"
        ),
        // Nested objects out of order at every depth, inside arrays, empty containers.
        (
            "1-abc", false, #"{"z":{"y":{"x":[{"b":1,"a":[{"d":null,"c":true}]}]},"w":[]},"a":{}}"#,
            "89c68c7e7048c8c50fe7c67b3b7e0112"
        ),
        // Unicode names and values (UTF-8 byte order: "B" < "a" < "z" < "é"), a surrogate pair, a
        // multi-digit parent generation.
        (
            "12-0123abcd", true, #"{"é":"ü","z":"日本語 ✓","B":"upper","a":"\ud83d\ude00"}"#,
            "5fdec3889b17640df24283890caf9c93"
        ),
        // Numbers: integral doubles print as integers, fractions and exponents as Swift prints them.
        (nil, true, #"{"n":[0,-1,2.5,-0.125,0.1,1e300,123456789012],"m":1.0}"#, "4d6ea28fdae4ff8e712974db998be5c9"),
        // Escapes: quote, backslash, \n \r \t, other control characters as \u00XX; "/" and DEL as is.
        (
            "3-ff", false, #"{"s":"q\"b\\s/n\nr\rt\tc\u0001\u001fe","k\"ey":"\u007f"}"#,
            "04d4e3ea51407ac6ab8c06d2a9dd6ab9"
        ),
        // `_attachments` is digested (its members sorted), `_id` and `_rev` are not.
        (
            "1-abc", false,
            #"{"_attachments":{"b.txt":{"stub":true,"digest":"sha1-y","revpos":1},"#
                + #""a.png":{"stub":true,"digest":"sha1-x","revpos":2,"content_type":"image/png"}},"#
                + #""_id":"skip","_rev":"1-abc","title":"t"}"#,
            "20add7adacbc9ee96cf4a89b212f0464"
        ),
    ]

    // Proves `next` and `nextWithSerialized` (Lite's save path) give the pinned digests, and that
    // `withText` spells `description`'s bytes.
    @Test(arguments: 0..<cases.count) func pinnedDigests(index: Int) throws {
        let c = Self.cases[index]
        let body = try JSON.parse(Array(c.body.utf8))
        let parent = c.parent.map { RevID($0)! }
        let expected = RevID(generation: (parent?.generation ?? 0) + 1, digest: c.digest)
        #expect(RevID.next(parent: parent, deleted: c.deleted, body: body) == expected)
        let (rev, stored) = try #require(RevID.nextWithSerialized(parent: parent, deleted: c.deleted, body: body))
        #expect(rev == expected)
        #expect(stored == body.serialized())
        #expect(rev.withText { Array($0) } == Array(rev.description.utf8))
    }

    // Proves `withText` spells any generation as `description` does (digits, zero, negatives built with
    // `init(generation:digest:)`).
    @Test func withTextSpellsDescription() {
        for g in [1, 9, 10, 99, 100, 12_345, 0, -7, Int.max, Int.min] {
            let rev = RevID(generation: g, digest: "9f2c")
            #expect(rev.withText { String(decoding: $0, as: UTF8.self) } == rev.description)
        }
    }
}
