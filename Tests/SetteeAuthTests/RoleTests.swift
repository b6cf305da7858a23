import SetteeAuth
import Testing

@Test func parsesCouchbaseRoleSyntax() throws {
    // Proves Couchbase role strings parse (bucket, wildcard, scope:collection) and print back unchanged.
    let text = "admin, data_reader[demo],bucket_full_access[*],data_writer[demo:_default:_default]"
    let roles = try Role.parseList(text).get()
    #expect(
        roles.map(\.description) == [
            "admin", "data_reader[demo]", "bucket_full_access[*]",
            "data_writer[demo:_default:_default]",
        ])
    #expect(roles[1] == Role(name: .dataReader, bucket: "demo"))
}

@Test func rejectsUnknownAndMalformedRoles() {
    // Proves unknown names, a missing bucket parameter and a bucket on a cluster role are refused, each listed.
    let r = Role.parseList("data_reader,admin[demo],super_user,data_reader[],bucket_admin[a")
    #expect(
        r
            == .failure(
                RoleListError(invalid: [
                    "data_reader", "admin[demo]", "super_user", "data_reader[]",
                    "bucket_admin[a",
                ])))
}

@Test func grantsFollowCouchbaseRoles() throws {
    // Proves the grant table: reader reads, writer writes without reading, full access does both,
    // roles bind only to their bucket, admin does everything, ro_admin only reads config.
    let reader = try Role.parseList("data_reader[demo]").get()
    #expect(reader.grants(onBucket: "demo") == [.readConfig, .read])
    #expect(reader.grants(onBucket: "other").isEmpty)
    let writer = try Role.parseList("data_writer[demo]").get()
    #expect(writer.grants(onBucket: "demo") == [.readConfig, .write])
    let full = try Role.parseList("bucket_full_access[*]").get()
    #expect(full.grants(onBucket: "any") == .all)
    #expect(!full.allows(.read))
    let admin = try Role.parseList("admin").get()
    #expect(admin.grants(onBucket: "x") == .all && admin.allows(.security))
    let cluster = try Role.parseList("cluster_admin").get()
    #expect(cluster.allows(.manage) && !cluster.allows(.security))
    let ro = try Role.parseList("ro_admin").get()
    #expect(ro.allows(.read) && !ro.allows(.manage) && ro.grants(onBucket: "demo") == [.readConfig])
}

@Test func anonymousGrantsOnlyOnOpenBuckets() {
    // Proves the anonymous grant rule (ADR 0015): an authType=none bucket gives config, reads, writes and
    // change streams but never management; a bucket with a password gives nothing.
    let open = BucketGrants.anonymous(bucketHasNoPassword: true)
    #expect(open.isSuperset(of: [.readConfig, .read, .write, .streamChanges]))
    #expect(!open.contains(.manage))
    #expect(BucketGrants.anonymous(bucketHasNoPassword: false).isEmpty)
}

@Test func systemXattrPrivilegesFollowCouchbase() throws {
    // Proves who holds SystemXattrRead / SystemXattrWrite (ADR 0029): admin, cluster_admin, bucket_admin and
    // bucket_full_access of the bucket, and mobile_sync_gateway (the gateway's role: data, change streams and
    // system XATTRs, but no flush or settings); data_reader / data_writer and ro_admin do not.
    for text in ["admin", "cluster_admin", "bucket_admin[demo]", "bucket_full_access[demo]", "mobile_sync_gateway[*]"] {
        let roles = try Role.parseList(text).get()
        #expect(roles.grants(onBucket: "demo").isSuperset(of: .systemXattrs), "\(text)")
    }
    for text in ["data_reader[demo]", "data_writer[demo]", "ro_admin", "bucket_admin[other]"] {
        let roles = try Role.parseList(text).get()
        #expect(roles.grants(onBucket: "demo").isDisjoint(with: .systemXattrs), "\(text)")
    }
    let gateway = try Role.parseList("mobile_sync_gateway[demo]").get()
    #expect(gateway.grants(onBucket: "demo") == [.readConfig, .read, .write, .streamChanges, .systemXattrs])
    #expect(gateway.grants(onBucket: "other").isEmpty && !gateway.allows(.read))
    #expect(Role(parsing: "mobile_sync_gateway") == nil)  // bucket-scoped
}
