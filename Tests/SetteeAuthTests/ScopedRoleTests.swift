import SetteeAuth
import SetteeCore
import Testing

// Roles qualified by scope and collection (ADR 0141): Couchbase 7's `data_reader[b:s:c]` syntax and kv_engine's
// three-way privilege decision (allowed, EACCESS, unknown).

@Test func parsesScopeAndCollectionQualifiedDataRoles() throws {
    // Proves the data roles take `[b:s]` and `[b:s:c]`, that `*` levels collapse (`[b:*:*]` is `[b]`, `[b:s:*]` is
    // `[b:s]`), and that they print back in the canonical form.
    let roles = try Role.parseList(
        "data_reader[b:s:c], data_writer[b:s], data_reader[b:*:*], data_writer[b:s2:*], data_reader[*:*]"
    ).get()
    #expect(
        roles.map(\.description) == [
            "data_reader[b:s:c]", "data_writer[b:s]", "data_reader[b]", "data_writer[b:s2]", "data_reader[*]",
        ])
    #expect(roles[0] == Role(name: .dataReader, bucket: "b", scope: "s", collection: "c"))
    #expect(roles[2] == Role(name: .dataReader, bucket: "b"))
    // A scope or collection that does not exist yet is accepted, as Couchbase does.
    #expect(Role(parsing: "data_reader[b:_default:_default]")?.scope == "_default")
}

@Test(arguments: [
    "data_reader[b:s:c:d]",  // four levels
    "data_reader[b::c]",  // an empty level
    "data_reader[b:s:]",
    "data_reader[*:s]",  // a name under a wildcard
    "data_reader[b:*:c]",
    "data_reader[b:s c]",  // a character names cannot have
    "data_reader[b:s\"x]",
    "data_reader[b:s/c]",
    "bucket_full_access[b:s]",  // a scope on a bucket-only role
    "mobile_sync_gateway[b:s:c]",
    "bucket_admin[b:*]",
    "data_reader[b:s:c]]",
])
func refusesMalformedScopedRoles(_ text: String) {
    // Proves each malformed role is refused (the REST edge answers 400 listing it), without trapping.
    #expect(Role(parsing: Substring(text)) == nil, "\(text)")
    #expect(Role.parseList(text) == .failure(RoleListError(invalid: [text])))
}

@Test func refusesHostileRoleTextWithinBounds() {
    // Proves overlong names and a flood of separators are refused by a bounded parse: a bucket past
    // Limits.maxBucketNameLength, a collection past Limits.maxCollectionNameLength, 100 000 colons.
    let longBucket = String(repeating: "b", count: Limits.maxBucketNameLength + 1)
    #expect(Role(parsing: Substring("data_reader[\(longBucket)]")) == nil)
    let longName = String(repeating: "c", count: Limits.maxCollectionNameLength + 1)
    #expect(Role(parsing: Substring("data_reader[b:s:\(longName)]")) == nil)
    #expect(Role(parsing: Substring("data_reader[b:s:\(longName.dropLast())]")) != nil)
    #expect(Role(parsing: Substring("data_reader[b" + String(repeating: ":", count: 100_000) + "]")) == nil)
    #expect(Role(parsing: "data_reader[b:\u{0}:c]") == nil)
}

@Test func collectionRoleDecidesPerCollection() throws {
    // Proves kv_engine's decision for `data_reader[b:s:c1]`: reads c1; a write there is EACCESS (some privilege,
    // not the needed one); c2, another scope and the default collection are unknown (no privilege at all); no
    // bucket-wide grant; the bucket can be selected (some privilege in it).
    let roles = try Role.parseList("data_reader[b:s:c1]").get()
    #expect(roles.access(.read, bucket: "b", scope: "s", collection: "c1") == .allowed)
    #expect(roles.access(.write, bucket: "b", scope: "s", collection: "c1") == .denied)
    #expect(roles.access(.read, bucket: "b", scope: "s", collection: "c2") == .unknown)
    #expect(roles.access(.read, bucket: "b", scope: "t", collection: "c1") == .unknown)
    #expect(roles.access(.read, bucket: "b", scope: "_default", collection: "_default") == .unknown)
    #expect(roles.access(.read, bucket: "other", scope: "s", collection: "c1") == .unknown)
    #expect(roles.grants(onBucket: "b").isEmpty)
    #expect(roles.grantsAnywhere(inBucket: "b").contains(.readConfig))
    #expect(roles.grantsAnywhere(inBucket: "other").isEmpty)
    #expect(roles.sees(bucket: "b", scope: "s") && !roles.sees(bucket: "b", scope: "t"))
    #expect(
        roles.sees(bucket: "b", scope: "s", collection: "c1") && !roles.sees(bucket: "b", scope: "s", collection: "c2"))
}

@Test func scopeBucketAndWildcardRolesReachWhatTheyName() throws {
    // Proves a scope role reaches every collection of its scope only, a bucket role (or `[b:*:*]`) every collection,
    // `[*]` every bucket, and that grants add up across roles (reader of c1 plus writer of the scope).
    let scope = try Role.parseList("data_writer[b:s]").get()
    #expect(scope.access(.write, bucket: "b", scope: "s", collection: "any") == .allowed)
    #expect(scope.access(.read, bucket: "b", scope: "s", collection: "any") == .denied)
    #expect(scope.access(.write, bucket: "b", scope: "_default", collection: "_default") == .unknown)
    let bucket = try Role.parseList("data_reader[b:*:*]").get()
    #expect(bucket.access(.read, bucket: "b", scope: "x", collection: "y") == .allowed)
    #expect(bucket.grants(onBucket: "b") == [.readConfig, .read])
    let every = try Role.parseList("data_reader[*]").get()
    #expect(every.access(.read, bucket: "z", scope: "x", collection: "y") == .allowed)
    let both = try Role.parseList("data_reader[b:s:c1],data_writer[b:s]").get()
    #expect(both.access([.read, .write], bucket: "b", scope: "s", collection: "c1") == .allowed)
    #expect(both.access([.read, .write], bucket: "b", scope: "s", collection: "c2") == .denied)
}

@Test func bucketRolesWithoutDataDenyRatherThanHide() throws {
    // Proves a principal holding a bucket-wide role without data rights (bucket_admin, ro_admin) is refused with
    // EACCESS, not told the collection is unknown: it holds privileges there (kv_engine's Fail, not
    // FailNoPrivileges).
    for text in ["bucket_admin[b]", "ro_admin"] {
        let roles = try Role.parseList(text).get()
        #expect(roles.access(.read, bucket: "b", scope: "s", collection: "c") == .denied, "\(text)")
    }
}

@Test func changeStreamsComeOnlyWithBucketWideReads() {
    // Proves the invariant the KV port's DCP relies on (ADR 0141): every role that grants `streamChanges` is a
    // bucket-only role that also reads every collection, so no principal may stream a collection it cannot read,
    // and a scope- or collection-qualified role never opens a change stream.
    for name in Role.Name.allCases {
        let role = Role(name: name, bucket: name.isBucketScoped ? "b" : nil)
        guard role.grants(onBucket: "b").contains(.streamChanges) else { continue }
        #expect(!name.isCollectionScoped, "\(name)")
        #expect(role.grants(onBucket: "b", scope: "s", collection: "c").contains(.read), "\(name)")
    }
    let scoped = Role(name: .dataReader, bucket: "b", scope: "s")
    #expect(!scoped.grants(onBucket: "b").contains(.streamChanges))
}
