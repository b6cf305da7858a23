import SetteeDocument
import SetteeJSON
import Testing

@Suite struct RevTreeStorageTests {
    // Proves the direct writer of the storage form is byte for byte `json().serialized()` (the format Lite
    // and older versions read) for trees with branches, several roots, deletions and bodies, and reads back.
    @Test func storageBytesEqualTheJSONForm() throws {
        var trees: [RevTree] = [RevTree()]
        var t = RevTree()
        try t.add(RevID("1-a")!, parent: nil, deleted: false, body: nil)
        trees.append(t)
        try t.add(RevID("2-b")!, parent: RevID("1-a")!, deleted: false, body: nil)
        _ = try t.addHistory([RevID("2-c")!, RevID("1-a")!], deleted: true, body: nil)
        _ = try t.addHistory([RevID("5-e\"q")!, RevID("4-d")!], deleted: false, body: nil)
        trees.append(t)
        try t.add(RevID("3-f")!, parent: RevID("2-b")!, deleted: true, body: nil)
        trees.append(t)
        t.setBody(Array(#"{"x":1}"#.utf8), of: RevID("3-f")!)
        trees.append(t)
        for tree in trees {
            let bytes = tree.storageBytes()
            #expect(bytes == tree.json().serialized())
            #expect(try RevTree(json: try JSON.parse(bytes)) == tree)
        }
    }

    // Proves rev id digests keep their exact value (MD5 of parent, deleted flag and canonical JSON; the
    // expected hex was computed outside Swift with Python's hashlib and json.dumps(sort_keys=True)).
    @Test func revisionDigestsAreKnownValues() throws {
        let body = try JSON.parse(
            #"{"z":1,"_id":"ignored","a":{"y":[1,"s",{"q":true,"b":null}],"b":2.5},"é":"ü\"x\n","#
                + #""_attachments":{"f":{"stub":true,"digest":"sha1-x"}}}"#)
        let child = try #require(RevID.next(parent: RevID("1-abc")!, deleted: false, body: body))
        #expect(child == RevID(generation: 2, digest: "ee44866a5bc3766f53b71d8d762bb218"))
        let root = try #require(RevID.next(parent: nil, deleted: true, body: body))
        #expect(root == RevID(generation: 1, digest: "097b47e3212e0f58dc3f784d6bedcac3"))
    }
}
