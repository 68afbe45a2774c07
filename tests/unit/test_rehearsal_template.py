"""The rehearsal's reading of a CloudFormation template: intrinsic functions, conditions, rules and the
creation order, each against what CloudFormation's documentation says the function returns."""

from __future__ import annotations

import pytest

from hyperpod_sim.rehearsal.template import Resolver, Template, TemplateError, check_rules, evaluate_conditions

PSEUDO = {
    "AWS::AccountId": "123456789012",
    "AWS::Region": "us-west-2",
    "AWS::Partition": "aws",
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::StackName": "Stack",
    "AWS::StackId": "arn:aws:cloudformation:us-west-2:123456789012:stack/Stack/x",
}


def _resolver(**kwargs) -> Resolver:
    resolver = Resolver(pseudo=dict(PSEUDO), **kwargs)
    resolver.refs["Queue"] = "https://sqs/123456789012/q"
    resolver.attributes["Queue"] = {"Arn": "arn:aws:sqs:us-west-2:123456789012:q", "QueueName": "q"}
    return resolver


def test_sub_replaces_pseudo_parameters_refs_attributes_and_its_own_variables():
    resolver = _resolver()
    value = {
        "Fn::Sub": ["${AWS::Region}/${Queue}/${Queue.Arn}/${Name}/${!Literal}", {"Name": {"Ref": "AWS::StackName"}}]
    }
    assert (
        resolver.resolve(value)
        == "us-west-2/https://sqs/123456789012/q/arn:aws:sqs:us-west-2:123456789012:q/Stack/${Literal}"
    )


def test_join_select_split_and_getatt_in_both_spellings():
    resolver = _resolver()
    assert (
        resolver.resolve({"Fn::Join": [":", ["a", {"Ref": "AWS::Partition"}, {"Fn::GetAtt": "Queue.QueueName"}]]})
        == "a:aws:q"
    )
    assert resolver.resolve({"Fn::Select": [1, {"Fn::Split": [",", "x,y,z"]}]}) == "y"
    assert resolver.resolve({"Fn::GetAtt": ["Queue", "Arn"]}).endswith(":q")


def test_no_value_removes_the_property_and_the_list_item():
    resolver = _resolver(conditions={"Off": False})
    resolved = resolver.resolve(
        {"A": {"Fn::If": ["Off", "x", {"Ref": "AWS::NoValue"}]}, "B": ["k", {"Ref": "AWS::NoValue"}]}
    )
    assert resolved == {"B": ["k"]}


def test_a_reference_to_nothing_and_an_unknown_function_are_errors_naming_where():
    resolver = _resolver()
    with pytest.raises(TemplateError, match="Res.Prop: Ref Missing"):
        resolver.resolve({"Prop": {"Ref": "Missing"}}, "Res")
    with pytest.raises(TemplateError, match="Fn::ImportValue"):
        resolver.resolve({"Fn::ImportValue": "x"}, "Res")


def _template(body: dict) -> Template:
    return Template("Stack", body, {})


def test_conditions_may_name_conditions_defined_after_them():
    template = _template(
        {
            "Resources": {},
            "Parameters": {},
            "Conditions": {
                "Both": {"Fn::And": [{"Condition": "IsWest"}, {"Fn::Not": [{"Condition": "IsChina"}]}]},
                "IsWest": {"Fn::Equals": [{"Ref": "AWS::Region"}, "us-west-2"]},
                "IsChina": {"Fn::Equals": [{"Ref": "AWS::Partition"}, "aws-cn"]},
            },
        }
    )
    resolver = _resolver()
    evaluate_conditions(template, resolver)
    assert resolver.conditions == {"IsWest": True, "IsChina": False, "Both": True}


def test_cdks_bootstrap_rule_refuses_an_old_bootstrap_stack():
    rule = {
        "CheckBootstrapVersion": {
            "Assertions": [
                {
                    "Assert": {"Fn::Not": [{"Fn::Contains": [["1", "2", "3", "4", "5"], {"Ref": "BootstrapVersion"}]}]},
                    "AssertDescription": "CDK bootstrap stack version 6 required.",
                }
            ]
        }
    }
    template = _template({"Resources": {}, "Rules": rule})
    assert check_rules(template, _resolver(parameters={"BootstrapVersion": "21"})) == []
    assert check_rules(template, _resolver(parameters={"BootstrapVersion": "5"})) == [
        "CheckBootstrapVersion: CDK bootstrap stack version 6 required."
    ]


def test_resources_come_after_what_they_reference_and_a_cycle_is_named():
    template = _template(
        {
            "Resources": {
                "Function": {"Type": "T", "Properties": {"Role": {"Fn::GetAtt": ["Role", "Arn"]}}},
                "Policy": {"Type": "T", "Properties": {"Doc": {"Fn::Sub": "${Function.Arn}"}}, "DependsOn": "Topic"},
                "Role": {"Type": "T", "Properties": {}},
                "Topic": {"Type": "T", "Properties": {}},
            }
        }
    )
    order = template.order()
    assert order.index("Role") < order.index("Function") < order.index("Policy")
    assert order.index("Topic") < order.index("Policy")
    cyclic = _template(
        {"Resources": {"A": {"Type": "T", "Properties": {"X": {"Ref": "B"}}}, "B": {"Type": "T", "DependsOn": ["A"]}}}
    )
    with pytest.raises(TemplateError, match="circular dependency among \\['A', 'B'\\]"):
        cyclic.order()
