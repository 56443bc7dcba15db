//! The signer against the published test vector of OCI's "Request Signatures" page: its test
//! private key (1024-bit PKCS#1), its GET and POST examples, and their signatures, reproduced
//! byte for byte.

use super::*;

const KEY: &str = include_str!("../../tests/data/oci-doc-test-key.pem");
const POST_BODY: &[u8] = include_bytes!("../../tests/data/post-body.json");
const KEY_ID: &str = "ocid1.tenancy.oc1..aaaaaaaaba3pv6wkcr4jqae5f15p2b2m2yt2j6rx32uzr4h25vqstifsfdsq/ocid1.user.oc1..aaaaaaaat5nvwcna5j6aqzjcaty5eqbb6qt2jvpkanghtgdaqedqw3rynjq/20:3b:97:13:55:1c:5b:0d:d3:37:d8:50:4e:c5:3a:34";
const DATE: &str = "Thu, 05 Jan 2014 21:31:40 GMT";
const HOST: &str = "iaas.us-phoenix-1.oraclecloud.com";
const GET_TARGET: &str = "/20160918/instances?availabilityDomain=Pjwf%3A%20PHX-AD-1&compartmentId=ocid1.compartment.oc1..aaaaaaaam3we6vgnherjq5q2idnccdflvjsnog7mlr6rtdb25gilchfeyjxa&displayName=TeamXInstances&volumeId=ocid1.volume.oc1.phx.abyhqljrgvttnlx73nmrwfaux7kcvzfs3s66izvxf2h4lgvyndsdsnoiwr5q";
const GET_SIGNATURE: &str = "GBas7grhyrhSKHP6AVIj/h5/Vp8bd/peM79H9Wv8kjoaCivujVXlpbKLjMPeDUhxkFIWtTtLBj3sUzaFj34XE6YZAHc9r2DmE4pMwOAy/kiITcZxa1oHPOeRheC0jP2dqbTll8fmTZVwKZOKHYPtrLJIJQHJjNvxFWeHQjMaR7M=";
const POST_SIGNATURE: &str = "Mje8vIDPlwIHmD/cTDwRxE7HaAvBg16JnVcsuqaNRim23fFPgQfLoOOxae6WqKb1uPjYEl0qIdazWaBy/Ml8DRhqlocMwoSXv0fbukP8J5N80LCmzT/FFBvIvTB91XuXI3hYfP9Zt1l7S6ieVadHUfqBedWH0itrtPJBgKmrWso=";

fn header<'a>(signed: &'a Signed, name: &str) -> &'a str {
    signed.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str()).expect("the header")
}

#[test]
fn the_published_get_example_is_reproduced() {
    let key = SigningKey::from_pem(KEY).expect("the published key reads");
    let request = Request { method: "GET", path_and_query: GET_TARGET, host: HOST, date: DATE, body: None };
    let (text, covered) = signing_string(&request);
    assert_eq!(
        text,
        format!("date: {DATE}\n(request-target): get {GET_TARGET}\nhost: {HOST}"),
        "the signing string"
    );
    assert_eq!(covered, "date (request-target) host");
    let signed = sign(&request, KEY_ID, &key).expect("signs");
    assert_eq!(
        header(&signed, "authorization"),
        format!(
            "Signature version=\"1\",keyId=\"{KEY_ID}\",algorithm=\"rsa-sha256\",headers=\"date (request-target) host\",signature=\"{GET_SIGNATURE}\""
        )
    );
    assert_eq!(header(&signed, "date"), DATE);
}

#[test]
fn the_published_post_example_is_reproduced() {
    let key = SigningKey::from_pem(KEY).expect("the published key reads");
    let request = Request {
        method: "POST",
        path_and_query: "/20160918/volumeAttachments",
        host: HOST,
        date: DATE,
        body: Some((POST_BODY, "application/json")),
    };
    assert_eq!(POST_BODY.len(), 316, "the published body");
    let (text, covered) = signing_string(&request);
    assert_eq!(
        text,
        format!(
            "date: {DATE}\n(request-target): post /20160918/volumeAttachments\nhost: {HOST}\ncontent-length: 316\ncontent-type: application/json\nx-content-sha256: V9Z20UJTvkvpJ50flBzKE32+6m2zJjweHpDMX/U4Uy0="
        )
    );
    assert_eq!(covered, "date (request-target) host content-length content-type x-content-sha256");
    let signed = sign(&request, KEY_ID, &key).expect("signs");
    assert!(header(&signed, "authorization").ends_with(&format!("signature=\"{POST_SIGNATURE}\"")));
    assert_eq!(header(&signed, "content-length"), "316");
    assert_eq!(header(&signed, "x-content-sha256"), "V9Z20UJTvkvpJ50flBzKE32+6m2zJjweHpDMX/U4Uy0=");
}

/// The same key as PKCS#8 (`openssl pkcs8 -topk8 -nocrypt`) signs the same.
#[test]
fn a_pkcs8_key_reads_and_signs_the_same() {
    let pkcs8 = include_str!("../../tests/data/oci-doc-test-key.pkcs8.pem");
    let key = SigningKey::from_pem(pkcs8).expect("PKCS#8 reads");
    let request = Request { method: "GET", path_and_query: GET_TARGET, host: HOST, date: DATE, body: None };
    let signed = sign(&request, KEY_ID, &key).expect("signs");
    assert!(header(&signed, "authorization").contains(GET_SIGNATURE));
}

#[test]
fn a_text_that_is_no_key_is_refused() {
    assert!(matches!(
        SigningKey::from_pem("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----"),
        Err(KeyError::Unreadable(_))
    ));
    assert!(matches!(SigningKey::from_pem("hello"), Err(KeyError::Unreadable(_))));
}
